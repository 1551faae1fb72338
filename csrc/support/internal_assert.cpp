#include "support/internal_assert.h"

namespace opara::detail {

void internal_assert_failed(const char* condition, const char* file, int line, const std::string& message) {
  throw InternalError(
      fmt::format("opara internal error (a bug in opara; please report it with this message): {} "
                  "[{} failed at {}:{}]",
                  message, condition, file, line));
}

}  // namespace opara::detail
