// The collectives' TaskWork keeps the Work protocol (work_contract.h).
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "collectives/task_work.h"
#include "work_contract.h"

namespace pscore {
namespace {

TEST(TaskWork, KeepsTheWorkProtocol) {
  for (bool fails : {false, true}) {
    for (int round = 0; round < 20; ++round) {
      auto w = std::make_shared<TaskWork>("task");
      EXPECT_EQ(w->what(), "task");
      expect_work_contract(
          *w,
          [&] { w->finish(fails ? std::make_exception_ptr(std::runtime_error("boom")) : nullptr); },
          fails);
    }
  }
}

}  // namespace
}  // namespace pscore
