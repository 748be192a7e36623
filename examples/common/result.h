// The closing line of every example, for scripts: RESULT {json}, keys in the
// order given. A number that is not finite (a diverged loss) is written as
// null, and "not_finite" names each such key with its value, so the line is
// always valid JSON and says why a value is missing:
//
//   print_result({{"example", "char_gpt"}, {"val_loss", NAN}});
//   // RESULT {"example": "char_gpt", "val_loss": null, "not_finite": {"val_loss": "nan"}}
#pragma once

#include <nlohmann/json.hpp>

namespace loom::examples {

void print_result(nlohmann::ordered_json fields);

}  // namespace loom::examples
