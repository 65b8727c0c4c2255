#include "store/prefix_store.h"

#include <stdexcept>

namespace pscore {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : Store(inner ? inner->timeout_ms() : 0), prefix_(std::move(prefix)), inner_(std::move(inner)) {
  if (!inner_) throw std::invalid_argument("PrefixStore: the inner store is null");
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  inner_->set(full(key), value);
}

std::string PrefixStore::get(const std::string& key) { return inner_->get(full(key)); }

int64_t PrefixStore::add(const std::string& key, int64_t amount) {
  return inner_->add(full(key), amount);
}

std::string PrefixStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  return inner_->compare_set(full(key), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& keys, int64_t timeout_ms) {
  inner_->wait(full(keys), timeout_ms);
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return inner_->check(full(keys)); }

bool PrefixStore::delete_key(const std::string& key) { return inner_->delete_key(full(key)); }

int64_t PrefixStore::num_keys() { return inner_->num_keys(); }

}  // namespace pscore
