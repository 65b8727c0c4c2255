#include "hogwild/optimizer_options.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace pscore::hogwild {
namespace {

std::string num(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

void require(bool ok, const std::string& what, const std::string& problem) {
  if (!ok) throw std::invalid_argument(what + ": " + problem);
}

void check_non_negative(double x, const char* name, const std::string& what) {
  require(std::isfinite(x) && x >= 0, what,
          std::string(name) + " = " + num(x) + " must be finite and >= 0");
}

}  // namespace

void check_options(const SgdOptions& o, const std::string& what) {
  check_non_negative(o.lr, "lr", what);
  check_non_negative(o.momentum, "momentum", what);
  check_non_negative(o.weight_decay, "weight_decay", what);
  require(std::isfinite(o.dampening), what, "dampening = " + num(o.dampening) + " is not finite");
  require(!o.nesterov || (o.momentum > 0 && o.dampening == 0), what,
          "Nesterov momentum needs momentum > 0 and dampening == 0 (momentum = " + num(o.momentum) +
              ", dampening = " + num(o.dampening) + ")");
}

void check_options(const AdagradOptions& o, const std::string& what) {
  check_non_negative(o.lr, "lr", what);
  check_non_negative(o.eps, "eps", what);
  check_non_negative(o.lr_decay, "lr_decay", what);
  check_non_negative(o.weight_decay, "weight_decay", what);
}

void check_options(const AdamOptions& o, const std::string& what) {
  check_non_negative(o.lr, "lr", what);
  check_non_negative(o.eps, "eps", what);
  check_non_negative(o.weight_decay, "weight_decay", what);
  for (double beta : {o.beta1, o.beta2}) {
    require(beta >= 0.0 && beta < 1.0, what,
            "betas (" + num(o.beta1) + ", " + num(o.beta2) + ") must lie in [0, 1)");
  }
}

}  // namespace pscore::hogwild
