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

// Messages are built only on failure: these checks run on every update.
void check_non_negative(double x, const char* name, const std::string& what) {
  if (!(std::isfinite(x) && x >= 0)) {
    throw std::invalid_argument(what + ": " + name + " = " + num(x) + " must be finite and >= 0");
  }
}

}  // namespace

void check_options(const SgdOptions& o, const std::string& what) {
  check_non_negative(o.lr, "lr", what);
  check_non_negative(o.momentum, "momentum", what);
  check_non_negative(o.weight_decay, "weight_decay", what);
  if (!std::isfinite(o.dampening)) {
    throw std::invalid_argument(what + ": dampening = " + num(o.dampening) + " is not finite");
  }
  if (o.nesterov && !(o.momentum > 0 && o.dampening == 0)) {
    throw std::invalid_argument(what +
                                ": Nesterov momentum needs momentum > 0 and dampening == 0 "
                                "(momentum = " +
                                num(o.momentum) + ", dampening = " + num(o.dampening) + ")");
  }
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
    if (!(beta >= 0.0 && beta < 1.0)) {
      throw std::invalid_argument(what + ": betas (" + num(o.beta1) + ", " + num(o.beta2) +
                                  ") must lie in [0, 1)");
    }
  }
}

}  // namespace pscore::hogwild
