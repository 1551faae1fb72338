#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "model_loading.h"

namespace opara::bench {

// --model and --dtype, the same on every subcommand: load_model() takes what they hold.
inline void add_model_flags(CLI::App* command, std::string& model, std::string& dtype) {
  command->add_option("--model,-m", model, "model file (.pt or .pt2) or name in torchscript_models/")->required();
  command
      ->add_option("--dtype", dtype,
                   "the model's export in this dtype (a name picks <name>_<dtype>_b1.pt, <name>_b1.pt for float32; a "
                   "file must have been "
                   "exported in it): scripts/export_models.py --dtype exports them. Default: as exported")
      ->check(CLI::IsMember(model_dtypes()));
}

}  // namespace opara::bench
