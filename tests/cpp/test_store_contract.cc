// The Store contract, run against HashStore and TCPStore.
// Ranks are threads; each gets its own handle to the same store (a TCP client per thread).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "common/error.h"
#include "store/hash_store.h"
#include "store/tcp_store.h"

namespace pscore {
namespace {

struct HashFactory {
  std::shared_ptr<HashStore> store = std::make_shared<HashStore>(HashStoreOptions{5000});
  std::shared_ptr<Store> open() { return store; }
};

struct TcpFactory {
  std::shared_ptr<TCPStore> master = [] {
    TCPStoreOptions o;
    o.is_master = true;
    o.timeout_ms = 5000;
    return std::make_shared<TCPStore>(o);
  }();
  std::shared_ptr<Store> open() {
    TCPStoreOptions o;
    o.port = master->port();
    o.timeout_ms = 5000;
    return std::make_shared<TCPStore>(o);
  }
};

template <typename Factory>
class StoreContract : public ::testing::Test {
 protected:
  Factory factory;
  std::shared_ptr<Store> store = factory.open();
};

using Factories = ::testing::Types<HashFactory, TcpFactory>;
TYPED_TEST_SUITE(StoreContract, Factories);

TYPED_TEST(StoreContract, SetGetBinary) {
  std::string binary("a\0b\xff", 4);
  this->store->set("k", binary);
  EXPECT_EQ(this->store->get("k"), binary);
  this->store->set("k", "");
  EXPECT_EQ(this->store->get("k"), "");
  std::string big(3 << 20, 'x');
  this->store->set("big", big);
  EXPECT_EQ(this->factory.open()->get("big"), big);
}

TYPED_TEST(StoreContract, GetBlocksUntilAnotherHandleSets) {
  auto other = this->factory.open();
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    other->set("late", "v");
  });
  EXPECT_EQ(this->store->get("late"), "v");
  setter.join();
}

TYPED_TEST(StoreContract, GetTimesOutNamingTheKey) {
  this->store->set_timeout_ms(100);
  try {
    this->store->get("never");
    FAIL() << "get did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never' was never set"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("100 ms"), std::string::npos) << e.what();
  }
}

TYPED_TEST(StoreContract, Add) {
  EXPECT_EQ(this->store->add("n", 5), 5);
  EXPECT_EQ(this->store->add("n", -7), -2);
  EXPECT_EQ(this->store->get("n"), "-2");
  this->store->set("word", "hello");
  EXPECT_THROW(this->store->add("word", 1), std::invalid_argument);
  EXPECT_EQ(this->store->get("word"), "hello");
}

TYPED_TEST(StoreContract, CompareSet) {
  EXPECT_EQ(this->store->compare_set("k", "", "first"), "first");
  EXPECT_EQ(this->store->compare_set("k", "wrong", "second"), "first");
  EXPECT_EQ(this->store->compare_set("k", "first", "second"), "second");
  EXPECT_EQ(this->store->compare_set("absent", "exp", "des"), "exp");
  EXPECT_FALSE(this->store->check({"absent"}));
}

TYPED_TEST(StoreContract, WaitNamesOnlyMissingKeys) {
  this->store->set("a", "1");
  this->store->wait({"a"}, 1000);
  this->store->wait({}, 0);
  try {
    this->store->wait({"a", "m1", "m2"}, 50);
    FAIL() << "wait did not time out";
  } catch (const TimeoutError& e) {
    std::string msg = e.what();
    std::string missing = msg.substr(msg.find("missing:"));
    EXPECT_NE(missing.find("m1'"), std::string::npos) << msg;
    EXPECT_NE(missing.find("m2'"), std::string::npos) << msg;
    EXPECT_EQ(missing.find("a'"), std::string::npos) << msg;
  }
}

TYPED_TEST(StoreContract, CheckDeleteNumKeys) {
  EXPECT_EQ(this->store->num_keys(), 0);
  EXPECT_TRUE(this->store->check({}));
  this->store->set("x", "1");
  this->store->add("y", 1);
  EXPECT_TRUE(this->store->check({"x", "y"}));
  EXPECT_FALSE(this->store->check({"x", "z"}));
  EXPECT_EQ(this->store->num_keys(), 2);
  EXPECT_TRUE(this->store->delete_key("x"));
  EXPECT_FALSE(this->store->delete_key("x"));
  EXPECT_EQ(this->store->num_keys(), 1);
  this->store->set(std::string(1, kInternalKeyPrefix) + "bookkeeping", "1");
  EXPECT_EQ(this->store->num_keys(), 1);
}

TYPED_TEST(StoreContract, ThreadsRendezvous) {
  constexpr int kRanks = 7;
  std::vector<std::thread> ranks;
  std::atomic<int> failures{0};
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      try {
        auto s = this->factory.open();
        for (int i = 0; i < 20; ++i) s->add("counter", 1);
        s->set("rank/" + std::to_string(r), std::to_string(r));
        std::vector<std::string> all;
        for (int j = 0; j < kRanks; ++j) all.push_back("rank/" + std::to_string(j));
        s->wait(all);
        for (int j = 0; j < kRanks; ++j)
          if (s->get(all[j]) != std::to_string(j)) failures++;
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        failures++;
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(this->store->get("counter"), std::to_string(kRanks * 20));
}

}  // namespace
}  // namespace pscore
