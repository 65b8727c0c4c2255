// Segment lifecycle: create/attach by name, the handle registry as a reference count, removal
// by the last handle or on request, crashed processes reaped, stale names reclaimed, lock
// takeover, and holders in another pid namespace seen as alive.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/error.h"
#include "hogwild/shared_table.h"

namespace hw = pscore::hogwild;
using pscore::DType;

namespace {

std::string unique_name(const char* tag) {
  static int n = 0;
  return std::string("gt-") + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
}

bool shm_exists(const std::string& name) {
  return ::access(("/dev/shm" + hw::Segment::shm_path(name)).c_str(), F_OK) == 0;
}

hw::TableSpec spec_of(std::vector<uint64_t> shape, DType dt = DType::kFloat32) {
  hw::TableSpec s;
  s.shape = std::move(shape);
  s.dtype = dt;
  return s;
}

std::shared_ptr<hw::SharedTable> create(const std::string& name,
                                        hw::TableSpec s = spec_of({8, 4})) {
  return hw::SharedTable::create(name, s, {});
}

std::shared_ptr<hw::SharedTable> attach(const std::string& name, int64_t wait_ms = 0) {
  hw::SegmentOptions o;
  o.wait_ms = wait_ms;
  return hw::SharedTable::attach(name, o);
}

// A locked SGD step of -1 on each element of `row` of a table 4 floats wide.
void locked_sgd_on_row(hw::SharedTable& t, int64_t row) {
  const std::vector<int64_t> ids{row};
  const std::vector<float> g(4, 1.f);
  hw::UpdateBatch b;
  b.ids = ids.data();
  b.num_ids = 1;
  b.grads = g.data();
  b.grads_numel = 4;
  b.locked = true;
  t.sgd(b, {1.0});
}

// Forks, runs fn in the child and returns the child's wait status.
template <typename Fn>
int in_child(Fn fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    fn();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(Segment, LastCloseRemovesTheName) {
  const std::string name = unique_name("life");
  auto a = create(name);
  auto b = attach(name);
  EXPECT_TRUE(a->is_creator());
  EXPECT_FALSE(b->is_creator());
  EXPECT_EQ(a->live_attachments(), 2);
  static_cast<float*>(a->array(-1))[5] = 42.f;
  EXPECT_EQ(static_cast<float*>(b->array(-1))[5], 42.f);
  a->close();
  EXPECT_TRUE(shm_exists(name)) << "b still holds it";
  EXPECT_EQ(b->live_attachments(), 1);
  b->close();
  EXPECT_FALSE(shm_exists(name));
  EXPECT_EQ(static_cast<float*>(b->array(-1))[5], 42.f) << "memory stays mapped after close";
}

TEST(Segment, DestructionDetachesToo) {
  const std::string name = unique_name("dtor");
  {
    auto a = create(name);
  }
  EXPECT_FALSE(shm_exists(name));
}

TEST(Segment, UnlinkRemovesTheNameButKeepsTheMemory) {
  const std::string name = unique_name("unlink");
  auto a = create(name);
  auto b = attach(name);
  a->unlink();
  EXPECT_FALSE(shm_exists(name));
  static_cast<float*>(b->array(-1))[0] = 7.f;
  EXPECT_EQ(static_cast<float*>(a->array(-1))[0], 7.f);
  EXPECT_THROW(attach(name), hw::SegmentMissing);
  auto c = create(name);  // the name is free again: a new, separate table
  EXPECT_EQ(static_cast<float*>(c->array(-1))[0], 0.f);
  a->close();
  b->close();
  EXPECT_TRUE(shm_exists(name)) << "closing the old table must not remove the new one";
}

TEST(Segment, NameErrors) {
  const std::string name = unique_name("errs");
  try {
    attach(name);
    FAIL();
  } catch (const hw::SegmentMissing& e) {
    EXPECT_NE(std::string(e.what()).find("no such table"), std::string::npos) << e.what();
  }
  auto a = create(name);
  try {
    create(name);
    FAIL();
  } catch (const hw::SegmentExists& e) {
    EXPECT_NE(std::string(e.what()).find("the name is taken"), std::string::npos) << e.what();
  }
  EXPECT_THROW(create("bad/name"), std::invalid_argument);
  EXPECT_THROW(create(""), std::invalid_argument);
  EXPECT_THROW(create(std::string(201, 'a')), std::invalid_argument);
}

TEST(Segment, BadSpecsAreRejectedBeforeAnythingIsCreated) {
  const std::string name = unique_name("spec");
  EXPECT_THROW(create(name, spec_of({4, 0})), std::invalid_argument);
  EXPECT_THROW(create(name, spec_of({})), std::invalid_argument);
  EXPECT_THROW(create(name, spec_of({1, 2, 3, 4, 5})), std::invalid_argument);
  EXPECT_THROW(create(name, spec_of({4}, DType::kInt32)), std::invalid_argument);
  auto s = spec_of({4});
  s.lock_stripes = 0;
  EXPECT_THROW(create(name, s), std::invalid_argument);
  hw::CreateOptions o;
  float init[3] = {1, 2, 3};
  o.init = init;
  o.init_nbytes = sizeof(init);
  EXPECT_THROW(hw::SharedTable::create(name, spec_of({4}), o), std::invalid_argument);
  EXPECT_FALSE(shm_exists(name));
}

TEST(Segment, AttachWaitsForTheNameToAppear) {
  const std::string name = unique_name("wait");
  std::shared_ptr<hw::SharedTable> a;
  std::thread creator([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    a = create(name);
  });
  auto b = attach(name, 5000);
  creator.join();
  EXPECT_EQ(b->rows(), 8u);
  EXPECT_EQ(b->shape(), (std::vector<uint64_t>{8, 4}));
}

TEST(Segment, ACrashedProcessIsReapedAndTheOthersKeepWorking) {
  const std::string name = unique_name("crash");
  auto a = create(name);
  int status = in_child([&] {
    auto c = attach(name);
    static_cast<float*>(c->array(-1))[1] = 3.f;
    ::kill(::getpid(), SIGKILL);  // dies holding its registration
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(static_cast<float*>(a->array(-1))[1], 3.f);
  EXPECT_EQ(a->live_attachments(), 1) << "the dead child's registration is reaped";
  a->close();
  EXPECT_FALSE(shm_exists(name));
}

TEST(Segment, AForkedChildDoesNotReleaseItsParentsRegistration) {
  const std::string name = unique_name("fork");
  auto a = create(name);
  in_child([&] { a->close(); });  // inherited handle: must be a no-op in the child
  EXPECT_EQ(a->live_attachments(), 1);
  EXPECT_TRUE(shm_exists(name));
}

// A child forked with the table open takes locks as itself: it registers anew on first use, so
// a lock it dies holding is taken over, and its own close leaves the parent's registration.
TEST(Segment, AForkedChildLocksAsItselfSoItsDeadLocksAreTakenOver) {
  const std::string name = unique_name("forklock");
  hw::CreateOptions o;
  o.segment.lock_timeout_ms = 500;
  auto a = hw::SharedTable::create(name, spec_of({8, 4}), o);
  const int32_t parent_tag = a->lock_owner().lock_tag();
  int status = in_child([&] {
    hw::lock_word(a->row_lock(0), a->lock_owner().lock_tag(), a->lock_owner(), 1000,
                  "test");        // the inherited handle
    ::kill(::getpid(), SIGKILL);  // dies inside its critical section
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  const int32_t holder = a->row_lock(0).owner.load();
  EXPECT_NE(holder, 0);
  EXPECT_NE(holder, parent_tag) << "the child locked under its parent's tag";
  locked_sgd_on_row(*a, 0);  // takes the dead child's lock over instead of timing out
  EXPECT_EQ(static_cast<float*>(a->array(-1))[0], -1.f);
  status = in_child([&] {
    hw::LockGuard guard(a->row_lock(5), a->lock_owner().lock_tag(), a->lock_owner(), 1000, "test");
    if (a->live_attachments() != 2) ::_exit(3);  // the parent's and its own
    a->close();
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(a->live_attachments(), 1);
  EXPECT_TRUE(shm_exists(name));
}

TEST(Segment, AStaleNameIsReclaimed) {
  const std::string name = unique_name("stale");
  int status = in_child([&] {
    auto c = create(name);
    ::_exit(0);  // exits without closing: the name stays behind
  });
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_TRUE(shm_exists(name));
  auto a = create(name);  // all holders are dead, so create takes the name over
  EXPECT_EQ(a->live_attachments(), 1);
  EXPECT_TRUE(hw::Segment::remove(name));
  EXPECT_FALSE(shm_exists(name));
  EXPECT_FALSE(hw::Segment::remove(name));
}

TEST(Segment, ALockLeftByADeadProcessIsTakenOver) {
  const std::string name = unique_name("lock");
  auto a = create(name);
  int status = in_child([&] {
    auto c = attach(name);
    hw::lock_word(c->row_lock(0), c->lock_owner().lock_tag(), c->lock_owner(), 1000, "test");
    ::kill(::getpid(), SIGKILL);  // dies inside its critical section
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_NE(a->row_lock(0).owner.load(), 0) << "the dead child still owns the stripe";
  locked_sgd_on_row(*a, 0);  // takes the dead owner's lock over instead of hanging
  EXPECT_EQ(static_cast<float*>(a->array(-1))[0], -1.f);
  EXPECT_EQ(a->row_lock(0).owner.load(), 0);
}

TEST(Segment, ALockHeldByALiveHolderTimesOut) {
  const std::string name = unique_name("lockto");
  hw::CreateOptions o;
  o.segment.lock_timeout_ms = 50;
  auto a = hw::SharedTable::create(name, spec_of({8, 4}), o);
  hw::lock_word(a->row_lock(3), a->lock_owner().lock_tag(), a->lock_owner(), 1000,
                "test");  // held by this (live) process
  try {
    locked_sgd_on_row(*a, 3);  // the holder is alive (it is us), so this waits out the timeout
    FAIL() << "expected a timeout";
  } catch (const pscore::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("for more than 50 ms"), std::string::npos) << e.what();
  }
  hw::unlock_word(a->row_lock(3));
}

// The lowest pid above 1 that no process in this pid namespace has.
pid_t a_free_pid() {
  for (pid_t p = 2;; ++p) {
    if (::kill(p, 0) != 0 && errno == ESRCH) return p;
  }
}

// Runs fn in a process of a new pid namespace whose pid there is `pid`, a number no process in
// this namespace has, so a liveness check by pid would call it dead. Returns the outer child.
template <typename Fn>
pid_t in_other_pid_namespace(pid_t pid, Fn fn) {
  const pid_t outer = ::fork();
  if (outer != 0) return outer;
  if (::unshare(CLONE_NEWPID) != 0) ::_exit(3);
  const pid_t init = ::fork();  // pid 1 there
  if (init == 0) {
    // The next pid handed out there is `pid` (by ns_last_pid rather than by forking up to it:
    // a sanitizer's helper threads take pids too).
    const std::string last = std::to_string(pid - 1);
    const int fd = ::open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
    if (fd < 0 || ::write(fd, last.data(), last.size()) != static_cast<ssize_t>(last.size())) {
      ::_exit(8);
    }
    ::close(fd);
    const pid_t holder = ::fork();
    if (holder == 0) {
      fn();
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(holder, &status, 0);
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 4);
  }
  int status = 0;
  ::waitpid(init, &status, 0);
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 5);
}

TEST(Segment, AHolderInAnotherPidNamespaceKeepsTheTableAndItsLock) {
  if (::geteuid() != 0) GTEST_SKIP() << "unshare(CLONE_NEWPID) needs root";
  const std::string name = unique_name("pidns");
  hw::CreateOptions o;
  o.segment.lock_timeout_ms = 100;
  auto a = hw::SharedTable::create(name, spec_of({8, 4}), o);
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t theirs = a_free_pid();
  const pid_t outer = in_other_pid_namespace(theirs, [&] {
    auto c = attach(name);
    if (::getpid() != theirs) ::_exit(6);
    hw::lock_word(c->row_lock(0), c->lock_owner().lock_tag(), c->lock_owner(), 1000, "test");
    char byte = 1;
    if (::write(ready[1], &byte, 1) != 1 || ::read(done[0], &byte, 1) != 1) ::_exit(7);
    hw::unlock_word(c->row_lock(0));
    c->close();  // the last handle by then: removes the name
  });
  ::close(ready[1]);  // a child that fails before writing gives end of file, not a hang
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the holder in the other namespace never attached";
  EXPECT_EQ(a->live_attachments(), 2) << "pid " << theirs << " is not ours, but its holder lives";
  try {
    locked_sgd_on_row(*a, 0);  // its holder lives: wait, do not take the lock over
    ADD_FAILURE() << "the live holder's lock was taken over";
  } catch (const pscore::TimeoutError& e) {
    const std::string want = "pid " + std::to_string(theirs) + " (handle slot";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  a->close();
  EXPECT_TRUE(shm_exists(name)) << "closing our handle must not remove a table still held";
  ASSERT_EQ(::write(done[1], &byte, 1), 1);
  int status = 0;
  ::waitpid(outer, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_FALSE(shm_exists(name));
  for (int fd : {ready[0], done[0], done[1]}) ::close(fd);
}

}  // namespace
