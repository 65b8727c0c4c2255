#include "ps/durability/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace pscore::ps {
namespace {

[[noreturn]] void type_error(const char* what, const char* want) {
  throw std::invalid_argument(std::string(what) + ": expected a JSON " + want);
}

void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

class Parser {
 public:
  explicit Parser(const std::string& t) : t_(t) {}
  Json document() {
    Json v = value(0);
    skip_ws();
    if (i_ != t_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw std::invalid_argument("invalid JSON at offset " + std::to_string(i_) + ": " + why);
  }
  void skip_ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\r' || t_[i_] == '\t'))
      ++i_;
  }
  char peek() {
    skip_ws();
    if (i_ >= t_.size()) fail("unexpected end");
    return t_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (t_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }
  Json value(int depth) {
    if (depth > 64) fail("nesting too deep");
    char c = peek();
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Json(string());
    if (literal("true")) return Json(true);
    if (literal("false")) return Json(false);
    if (literal("null")) return Json();
    return number();
  }
  Json object(int depth) {
    Json o = Json::object();
    expect('{');
    if (peek() == '}') {
      ++i_;
      return o;
    }
    for (;;) {
      if (peek() != '"') fail("expected a key");
      std::string k = string();
      expect(':');
      o.set(k, value(depth + 1));
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}');
      return o;
    }
  }
  Json array(int depth) {
    Json a = Json::array();
    expect('[');
    if (peek() == ']') {
      ++i_;
      return a;
    }
    for (;;) {
      a.push_back(value(depth + 1));
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect(']');
      return a;
    }
  }
  std::string string() {
    expect('"');
    std::string s;
    while (i_ < t_.size() && t_[i_] != '"') {
      char c = t_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        s += c;
        continue;
      }
      if (i_ >= t_.size()) fail("unterminated escape");
      char e = t_[i_++];
      switch (e) {
        case '"':
          s += '"';
          break;
        case '\\':
          s += '\\';
          break;
        case '/':
          s += '/';
          break;
        case 'b':
          s += '\b';
          break;
        case 'f':
          s += '\f';
          break;
        case 'n':
          s += '\n';
          break;
        case 'r':
          s += '\r';
          break;
        case 't':
          s += '\t';
          break;
        case 'u':
          s += unicode();
          break;
        default:
          fail("bad escape");
      }
    }
    if (i_ >= t_.size()) fail("unterminated string");
    ++i_;
    return s;
  }
  std::string unicode() {
    if (i_ + 4 > t_.size()) fail("short \\u escape");
    unsigned cp = static_cast<unsigned>(std::strtoul(t_.substr(i_, 4).c_str(), nullptr, 16));
    i_ += 4;
    std::string out;
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
    return out;
  }
  Json number() {
    size_t start = i_;
    bool integral = true;
    if (i_ < t_.size() && (t_[i_] == '-' || t_[i_] == '+')) ++i_;
    while (i_ < t_.size()) {
      char c = t_[i_];
      if (c >= '0' && c <= '9') {
        ++i_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+') {
        integral = false;
        ++i_;
      } else {
        break;
      }
    }
    std::string tok = t_.substr(start, i_ - start);
    if (tok.empty() || tok == "-") fail("expected a value");
    char* end = nullptr;
    if (integral) {
      errno = 0;
      long long v = std::strtoll(tok.c_str(), &end, 10);
      if (*end != '\0' || errno == ERANGE) fail("bad integer");
      return Json(static_cast<int64_t>(v));
    }
    double d = std::strtod(tok.c_str(), &end);
    if (*end != '\0' || !std::isfinite(d)) fail("bad number");
    return Json(d);
  }

  const std::string& t_;
  size_t i_ = 0;
};

}  // namespace

int64_t Json::as_int(const char* what) const {
  if (type_ == Type::kInt) return int_;
  if (type_ == Type::kDouble && std::floor(double_) == double_)
    return static_cast<int64_t>(double_);
  type_error(what, "integer");
}

double Json::as_double(const char* what) const {
  if (type_ == Type::kDouble) return double_;
  if (type_ == Type::kInt) return static_cast<double>(int_);
  type_error(what, "number");
}

bool Json::as_bool(const char* what) const {
  if (type_ != Type::kBool) type_error(what, "boolean");
  return int_ != 0;
}

const std::string& Json::as_string(const char* what) const {
  if (type_ != Type::kString) type_error(what, "string");
  return str_;
}

const Json::Array& Json::as_array(const char* what) const {
  if (type_ != Type::kArray) type_error(what, "array");
  return arr_;
}

const Json::Object& Json::as_object(const char* what) const {
  if (type_ != Type::kObject) type_error(what, "object");
  return obj_;
}

void Json::push_back(Json v) {
  if (type_ != Type::kArray) type_error("push_back", "array");
  arr_.push_back(std::move(v));
}

Json& Json::set(const std::string& key, Json v) {
  if (type_ != Type::kObject) type_error("set", "object");
  for (auto& kv : obj_)
    if (kv.first == key) return kv.second = std::move(v);
  obj_.emplace_back(key, std::move(v));
  return obj_.back().second;
}

const Json* Json::find(const std::string& key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& kv : obj_)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

const Json& Json::at(const std::string& key) const {
  const Json* v = find(key);
  if (!v) throw std::invalid_argument("JSON object has no member '" + key + "'");
  return *v;
}

void Json::dump_to(std::string& out) const {
  switch (type_) {
    case Type::kNull:
      out += "null";
      return;
    case Type::kBool:
      out += int_ ? "true" : "false";
      return;
    case Type::kInt:
      out += std::to_string(int_);
      return;
    case Type::kDouble: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.17g", double_);
      std::string s = buf;
      if (s.find_first_of(".eE") == std::string::npos) s += ".0";
      out += s;
      return;
    }
    case Type::kString:
      dump_string(str_, out);
      return;
    case Type::kArray:
      out += '[';
      for (size_t i = 0; i < arr_.size(); ++i) {
        if (i) out += ',';
        arr_[i].dump_to(out);
      }
      out += ']';
      return;
    case Type::kObject:
      out += '{';
      for (size_t i = 0; i < obj_.size(); ++i) {
        if (i) out += ',';
        dump_string(obj_[i].first, out);
        out += ':';
        obj_[i].second.dump_to(out);
      }
      out += '}';
      return;
  }
}

std::string Json::dump() const {
  std::string s;
  dump_to(s);
  return s;
}

Json Json::parse(const std::string& text) { return Parser(text).document(); }

}  // namespace pscore::ps
