// The Work protocol (common/work.h), checked the same way on each implementation.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <thread>

#include "common/work.h"

// `finish` completes `w` (with a std::runtime_error("boom") when `fails`); it runs on another
// thread while this one waits, as a background task or an I/O thread would.
inline void expect_work_contract(pscore::Work& w, const std::function<void()>& finish, bool fails) {
  EXPECT_FALSE(w.is_completed());
  EXPECT_FALSE(w.wait(0));  // still running: false, not an exception
  EXPECT_FALSE(w.wait(20));
  EXPECT_EQ(w.exception(), nullptr);
  EXPECT_FALSE(w.failed());
  EXPECT_EQ(w.exception_message(), "");
  std::thread finisher(finish);
  if (fails) {
    EXPECT_THROW(w.wait(), std::runtime_error);
  } else {
    EXPECT_TRUE(w.wait());
  }
  finisher.join();
  EXPECT_TRUE(w.is_completed());
  EXPECT_EQ(w.failed(), fails);
  EXPECT_EQ(w.exception() != nullptr, fails);
  EXPECT_EQ(w.exception_message(), fails ? "boom" : "");
  if (fails) {
    EXPECT_THROW(w.wait(0), std::runtime_error);  // every wait reports it
  } else {
    EXPECT_TRUE(w.wait(0));
  }
}
