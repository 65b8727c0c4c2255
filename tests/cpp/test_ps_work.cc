// The parameter-server client's Work keeps the Work protocol (work_contract.h): it completes
// when every sub-request and every child has, with the first failure.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "ps/client/client_work.h"
#include "work_contract.h"

namespace pscore::ps {
namespace {

std::shared_ptr<Work> with_subs(int n) {
  auto w = std::make_shared<Work>("push 'w'");
  for (int i = 0; i < n; ++i) {
    auto s = std::make_shared<SubRequest>();
    s->shard = i;
    w->subs.push_back(s);
  }
  return w;
}

TEST(PsWork, KeepsTheWorkProtocol) {
  for (bool fails : {false, true}) {
    for (int round = 0; round < 20; ++round) {
      auto w = with_subs(2);
      expect_work_contract(
          *w,
          [&] {
            w->finish_sub(*w->subs[0]);
            if (fails) w->subs[1]->error = std::make_exception_ptr(std::runtime_error("boom"));
            w->finish_sub(*w->subs[1]);
          },
          fails);
    }
  }
}

TEST(PsWork, ACombinedWorkWaitsForItsChildren) {
  for (bool fails : {false, true}) {
    auto combined = std::make_shared<Work>("batch");
    auto child = with_subs(1);
    combined->children.push_back(child);
    expect_work_contract(
        *combined,
        [&] {
          if (fails) child->subs[0]->error = std::make_exception_ptr(std::runtime_error("boom"));
          child->finish_sub(*child->subs[0]);
        },
        fails);
  }
}

}  // namespace
}  // namespace pscore::ps
