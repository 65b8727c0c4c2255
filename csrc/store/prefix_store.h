// PrefixStore: a view of another store where every key is "<prefix>/<key>", so groups and
// subsystems share one store without colliding.
#pragma once

#include <memory>

#include "store/store.h"

namespace pscore {

class PrefixStore : public Store {
 public:
  // Shares ownership of `inner`; the timeout is the inner store's (setting it sets that).
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t amount) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, int64_t timeout_ms) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  // The inner store's count (keys of every prefix), as torch's PrefixStore.
  int64_t num_keys() override;

  int64_t timeout_ms() const override { return inner_->timeout_ms(); }
  void set_timeout_ms(int64_t timeout_ms) override { inner_->set_timeout_ms(timeout_ms); }

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& inner() const { return inner_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace pscore
