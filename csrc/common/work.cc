#include "common/work.h"

namespace pscore {

std::string Work::exception_message() {
  std::exception_ptr error = exception();
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace pscore
