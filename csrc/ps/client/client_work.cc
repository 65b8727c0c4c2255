#include "ps/client/client_work.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"

namespace pscore::ps {

bool Work::complete_locked() const { return finished_ == subs.size(); }

bool Work::wait(int64_t timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (auto& child : children) {
    int64_t left = timeout_ms < 0
                       ? -1
                       : std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  until - std::chrono::steady_clock::now())
                                                  .count());
    if (!child->wait(left)) return false;
  }
  std::unique_lock<std::mutex> lk(mu_);
  if (timeout_ms < 0) {
    cv_.wait(lk, [&] { return complete_locked(); });
  } else if (!cv_.wait_until(lk, until, [&] { return complete_locked(); })) {
    return false;
  }
  for (auto& s : subs)
    if (s->error) std::rethrow_exception(s->error);
  return true;
}

bool Work::is_completed() {
  for (auto& child : children)
    if (!child->is_completed()) return false;
  std::lock_guard<std::mutex> lk(mu_);
  return complete_locked();
}

std::exception_ptr Work::exception() {
  if (!is_completed()) return nullptr;
  for (auto& child : children)
    if (auto error = child->exception()) return error;
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& s : subs)
    if (s->error) return s->error;
  return nullptr;
}

// The shards of this work's sub-requests, and its children's, that pick() holds for: sorted, once.
std::vector<int> Work::shards_where(bool (*pick)(const SubRequest&)) {
  std::vector<int> out;
  for (auto& child : children)
    for (int s : child->shards_where(pick)) out.push_back(s);
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& s : subs)
      if (pick(*s)) out.push_back(s->shard);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> Work::failed_shards() {
  return shards_where([](const SubRequest& s) { return s.done && s.error && s.retryable_error; });
}

std::vector<int> Work::pending_shards() {
  return shards_where([](const SubRequest& s) { return !s.done; });
}

int64_t Work::progress() {
  int64_t p = 0;
  for (auto& child : children) p = std::max(p, child->progress());
  std::lock_guard<std::mutex> lk(mu_);
  return std::max(p, progress_);
}

std::vector<int64_t> Work::status_counts() {
  std::vector<int64_t> c(3, 0);
  for (auto& child : children) {
    auto cc = child->status_counts();
    for (size_t i = 0; i < c.size(); ++i) c[i] += cc[i];
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < c.size(); ++i) c[i] += status_counts_[i];
  return c;
}

std::vector<std::string> Work::replies() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::string> out;
  for (auto& s : subs)
    out.emplace_back(reinterpret_cast<const char*>(s->reply.data()), s->reply.size());
  return out;
}

void Work::finish_sub(SubRequest& s) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    s.done = true;
    s.sending = false;
    ++finished_;
  }
  cv_.notify_all();
}

void Work::note_push(uint8_t status, int64_t progress) {
  std::lock_guard<std::mutex> lk(mu_);
  if (status < status_counts_.size()) ++status_counts_[status];
  progress_ = std::max(progress_, progress);
}

std::vector<std::shared_ptr<SubRequest>> Work::take_failed() {
  std::vector<std::shared_ptr<SubRequest>> out;
  for (auto& child : children)
    for (auto& s : child->take_failed()) out.push_back(s);
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& s : subs)
    if (s->done && s->error && !s->retryable_error) std::rethrow_exception(s->error);
  for (auto& s : subs) {
    if (!(s->done && s->error)) continue;
    s->done = false;
    s->error = nullptr;
    s->retryable_error = false;
    s->reply = ByteBuffer();
    --finished_;
    out.push_back(s);
  }
  return out;
}

}  // namespace pscore::ps
