#pragma once

// Options from text, for the interfaces that carry them as strings: the torch.classes extension
// (a Dict(str, str)), the Python package's keyword arguments and configuration files.

#include <map>
#include <string>
#include <vector>

#include "opara/compiled_model.h"
#include "opara/export.h"

namespace opara {

// Keys are Options' member names ("streams", "max_streams", ...); values as the command line
// spells them ("nimble", "4", "keep-alive", "cuda:0"). Throws opara::Error naming the key and
// the values it accepts for an unknown key or a bad value.
OPARA_API Options options_from_text(const std::map<std::string, std::string>& text);

// The keys options_from_text accepts, in documentation order.
OPARA_API std::vector<std::string> option_keys();

}  // namespace opara
