// A small JSON value with a strict parser and a writer: enough for safetensors headers and the
// checkpoint's table descriptions. Integers stay exact (int64); parse errors throw
// std::invalid_argument with the offset.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pscore::ps {

class Json {
 public:
  enum class Type { kNull, kBool, kInt, kDouble, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;  // keeps insertion order

  Json() = default;
  Json(bool b) : type_(Type::kBool), int_(b) {}                           // NOLINT
  Json(int v) : type_(Type::kInt), int_(v) {}                             // NOLINT
  Json(int64_t v) : type_(Type::kInt), int_(v) {}                         // NOLINT
  Json(uint64_t v) : type_(Type::kInt), int_(static_cast<int64_t>(v)) {}  // NOLINT
  Json(double v) : type_(Type::kDouble), double_(v) {}                    // NOLINT
  Json(const char* s) : type_(Type::kString), str_(s) {}                  // NOLINT
  Json(std::string s) : type_(Type::kString), str_(std::move(s)) {}       // NOLINT
  static Json array() {
    Json j;
    j.type_ = Type::kArray;
    return j;
  }
  static Json object() {
    Json j;
    j.type_ = Type::kObject;
    return j;
  }

  Type type() const { return type_; }
  bool is_object() const { return type_ == Type::kObject; }
  // Typed accessors throw std::invalid_argument naming `what` on a type mismatch.
  int64_t as_int(const char* what = "value") const;
  double as_double(const char* what = "value") const;
  bool as_bool(const char* what = "value") const;
  const std::string& as_string(const char* what = "value") const;
  const Array& as_array(const char* what = "value") const;
  const Object& as_object(const char* what = "value") const;

  void push_back(Json v);
  Json& set(const std::string& key, Json v);
  // The member `key`, or nullptr.
  const Json* find(const std::string& key) const;
  // The member `key`; throws std::invalid_argument when missing.
  const Json& at(const std::string& key) const;

  std::string dump() const;
  static Json parse(const std::string& text);

 private:
  void dump_to(std::string& out) const;
  Type type_ = Type::kNull;
  int64_t int_ = 0;
  double double_ = 0;
  std::string str_;
  Array arr_;
  Object obj_;
};

}  // namespace pscore::ps
