#include "opara/options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string_view>
#include <utility>

#include "opara/error.h"

namespace opara {
namespace {

[[noreturn]] void bad_value(std::string_view key, std::string_view value, std::string_view expected) {
  throw Error(fmt::format("option {}='{}': expected {}", key, value, expected));
}

int parse_int(std::string_view key, std::string_view value, int minimum) {
  int number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (error != std::errc{} || end != value.data() + value.size() || number < minimum) {
    bad_value(key, value, fmt::format("a whole number of at least {}", minimum));
  }
  return number;
}

// A decimal number above 0, or from 0 on with `allow_zero`; NaN and trailing text are refused.
double parse_number(std::string_view key, const std::string& value, bool allow_zero) {
  std::size_t used = 0;
  double number = -1;
  try {
    number = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const bool in_range = allow_zero ? number >= 0 : number > 0;
  if (used == 0 || used != value.size() || !in_range) {
    bad_value(key, value, allow_zero ? "a number of at least 0" : "a number above 0");
  }
  return number;
}

// "3,0" -> a graph memory pool's id, as torch.cuda.graph_pool_handle() gives it.
std::pair<unsigned long long, unsigned long long> parse_pool(std::string_view key, std::string_view value) {
  const auto comma = value.find(',');
  std::pair<unsigned long long, unsigned long long> id{0, 0};
  const auto number = [&](std::string_view text, unsigned long long& out) {
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
    return error == std::errc{} && end == text.data() + text.size() && !text.empty();
  };
  if (comma == std::string_view::npos || !number(value.substr(0, comma), id.first) ||
      !number(value.substr(comma + 1), id.second)) {
    bad_value(key, value, "two whole numbers 'a,b' (torch.cuda.graph_pool_handle())");
  }
  return id;
}

// "1.3x" -> a ratio to the sequential graph's pool; "512MiB", "2GB", "1048576" -> bytes.
MemoryBudget parse_budget(std::string_view key, const std::string& value) {
  static const std::string number = R"(([0-9]*\.?[0-9]+)\s*)";
  static const std::string unit = R"((B|KB|MB|GB|KiB|MiB|GiB)?)";
  static const std::regex ratio_form(number + "x(?:\\s*\\+\\s*" + number + unit + ")?");
  static const std::regex size_form(number + unit);
  static const std::map<std::string, double> units = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}};
  const auto bytes = [&](const std::ssub_match& amount, const std::ssub_match& in) {
    return static_cast<std::size_t>(std::stod(amount.str()) * units.at(in.str()));
  };
  const char* forms =
      "a ratio to the sequential graph's pool ('1.3x'), with the headroom it keeps at least ('1.3x+0', "
      "'1.3x+16MiB'; 64MiB unless given), or a size ('512MiB', '2GB', bytes)";
  std::smatch match;
  MemoryBudget budget;
  if (std::regex_match(value, match, ratio_form)) {
    budget.ratio = std::stod(match[1].str());
    if (budget.ratio <= 0) bad_value(key, value, forms);
    if (match[2].matched) budget.headroom_bytes = bytes(match[2], match[3]);
  } else if (std::regex_match(value, match, size_form) && std::stod(match[1].str()) > 0) {
    budget.bytes = bytes(match[1], match[2]);
    if (budget.bytes == 0) bad_value(key, value, "a size of at least one byte ('512MiB', '2GB', bytes) or a ratio");
  } else {
    bad_value(key, value, forms);
  }
  return budget;
}

// "12,aten::relu" -> {"12", "aten::relu"}; empty pieces are dropped.
std::vector<std::string> split_names(const std::string& value) {
  std::vector<std::string> names;
  std::stringstream stream(value);
  for (std::string name; std::getline(stream, name, ',');) {
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

template <typename Choice, std::size_t N>
Choice parse_choice(std::string_view key, std::string_view value,
                    const std::array<std::pair<std::string_view, Choice>, N>& choices) {
  std::vector<std::string_view> names;
  for (const auto& [name, choice] : choices) {
    if (name == value) return choice;
    names.push_back(name);
  }
  bad_value(key, value, fmt::format("one of {}", fmt::join(names, ", ")));
}

bool parse_bool(std::string_view key, std::string_view value) {
  return parse_choice(key, value, std::array<std::pair<std::string_view, bool>, 2>{{{"true", true}, {"false", false}}});
}

c10::Device parse_device(std::string_view key, const std::string& value) {
  try {
    return c10::Device(value);
  } catch (const std::exception&) {
    bad_value(key, value, "a device such as cpu, cuda or cuda:1");
  }
}

// The policy parsers name what they parse; this adds which option it came from.
template <typename Parse>
auto with_key(std::string_view key, Parse parse) {
  try {
    return parse();
  } catch (const Error& error) {
    throw Error(fmt::format("option {}: {}", key, error.what()));
  }
}

// MemoryProtection by name, both ways.
constexpr std::array<std::pair<std::string_view, MemoryProtection>, 3> kMemoryProtections{{
    {"record-stream", MemoryProtection::kRecordStream},
    {"keep-alive", MemoryProtection::kKeepAlive},
    {"smaller-pool", MemoryProtection::kSmallerPool},
}};

using Setter = std::function<void(Options&, const std::string&)>;

// In documentation order; each entry parses one member.
const std::vector<std::pair<std::string, Setter>>& setters() {
  static const std::vector<std::pair<std::string, Setter>> table = {
      {"device", [](Options& o, const std::string& v) { o.device = parse_device("device", v); }},
      {"streams",
       [](Options& o, const std::string& v) {
         o.plan.streams = with_key("streams", [&] { return parse_stream_policy(v); });
       }},
      {"order", [](Options& o,
                   const std::string& v) { o.plan.order = with_key("order", [&] { return parse_order_policy(v); }); }},
      {"max_streams", [](Options& o, const std::string& v) { o.plan.max_streams = parse_int("max_streams", v, 0); }},
      {"regions", [](Options& o, const std::string& v) { o.plan.regions = parse_bool("regions", v); }},
      {"region_min_share",
       [](Options& o, const std::string& v) {
         o.plan.region_min_share = parse_number("region_min_share", v, /*allow_zero=*/true);
       }},
      {"profile", [](Options& o, const std::string& v) { o.costs.profile = v; }},
      {"allow_profile_mismatch",
       [](Options& o, const std::string& v) {
         o.costs.allow_profile_mismatch = parse_bool("allow_profile_mismatch", v);
       }},
      {"ridge_point",
       [](Options& o, const std::string& v) {
         o.costs.ridge_point = parse_number("ridge_point", v, /*allow_zero=*/false);
       }},
      {"outputs",
       [](Options& o, const std::string& v) {
         o.outputs = parse_choice("outputs", v,
                                  std::array<std::pair<std::string_view, Options::Outputs>, 2>{{
                                      {"clone", Options::Outputs::kClone},
                                      {"view", Options::Outputs::kView},
                                  }});
       }},
      {"memory",
       [](Options& o, const std::string& v) { o.cuda.memory = parse_choice("memory", v, kMemoryProtections); }},
      {"memory_pool", [](Options& o, const std::string& v) { o.cuda.memory_pool = parse_pool("memory_pool", v); }},
      {"cuda_measure_ms",
       [](Options& o, const std::string& v) {
         o.cuda.measure_ms = parse_number("cuda_measure_ms", v, /*allow_zero=*/true);
       }},
      {"memory_budget",
       [](Options& o, const std::string& v) { o.cuda.memory_budget = parse_budget("memory_budget", v); }},
      {"on_uncapturable",
       [](Options& o, const std::string& v) {
         o.cuda.on_uncapturable = parse_choice("on_uncapturable", v,
                                               std::array<std::pair<std::string_view, CudaOptions::OnUncapturable>, 2>{{
                                                   {"split", CudaOptions::OnUncapturable::kSplit},
                                                   {"error", CudaOptions::OnUncapturable::kError},
                                               }});
       }},
      {"warmup_runs", [](Options& o, const std::string& v) { o.cuda.warmup_runs = parse_int("warmup_runs", v, 2); }},
      {"intra_op_threads",
       [](Options& o, const std::string& v) { o.cpu.intra_op_threads = parse_int("intra_op_threads", v, 0); }},
      {"pin_workers", [](Options& o, const std::string& v) { o.cpu.pin_workers = parse_bool("pin_workers", v); }},
      {"overflow",
       [](Options& o, const std::string& v) {
         o.overflow.policy = with_key("overflow", [&] { return parse_overflow_policy(v); });
       }},
      {"split_min_us",
       [](Options& o, const std::string& v) {
         o.cpu.split_min_us = parse_number("split_min_us", v, /*allow_zero=*/true);
       }},
      {"cpu_tuning_ms",
       [](Options& o, const std::string& v) {
         o.cpu.tuning_ms = parse_number("cpu_tuning_ms", v, /*allow_zero=*/true);
       }},
      {"alpha_us",
       [](Options& o, const std::string& v) {
         o.overflow.alpha_us = parse_number("alpha_us", v, /*allow_zero=*/true);
       }},
      {"cpu_nodes", [](Options& o, const std::string& v) { o.overflow.cpu_nodes = split_names(v); }},
      {"static_inputs",
       [](Options& o, const std::string& v) {
         o.static_inputs.clear();
         for (const std::string& index : split_names(v))
           o.static_inputs.push_back(parse_int("static_inputs", index, 0));
       }},
      {"state_in_place", [](Options& o, const std::string& v) { o.state_in_place = parse_bool("state_in_place", v); }},
  };
  return table;
}

}  // namespace

std::string_view to_string(MemoryProtection memory) {
  for (const auto& [name, protection] : kMemoryProtections) {
    if (protection == memory) return name;
  }
  return "unknown";
}

std::vector<std::string> option_keys() {
  std::vector<std::string> keys;
  for (const auto& [key, setter] : setters()) keys.push_back(key);
  return keys;
}

Options options_from_text(const std::map<std::string, std::string>& text) {
  Options options;
  for (const auto& [key, value] : text) {
    const auto& table = setters();
    const auto entry =
        std::find_if(table.begin(), table.end(), [&key = key](const auto& setter) { return setter.first == key; });
    if (entry == table.end()) {
      throw Error(fmt::format("unknown option '{}'; the options are: {}", key, fmt::join(option_keys(), ", ")));
    }
    entry->second(options, value);
  }
  return options;
}

}  // namespace opara
