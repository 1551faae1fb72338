// opara-bench: inspect, plan and time models under opara's execution modes.
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "info_command.h"
#include "opara/error.h"
#include "opara/version.h"
#include "plan_command.h"
#include "profile_command.h"
#include "run_command.h"
#include "trace_command.h"

namespace {

constexpr int kUsageError = 2;  // bad flags or values, as the shell convention has it
constexpr int kFailure = 1;     // the model or the run failed

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"opara-bench: parallel multi-stream CUDA Graph inference for LibTorch models"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version", [] { return opara::to_string(opara::version()); },
      "print opara's version, the torch it was built against and the torch it runs, and exit");
  opara::bench::add_info_command(app);
  opara::bench::add_plan_command(app);
  opara::bench::add_profile_command(app);
  opara::bench::add_run_command(app);
  opara::bench::add_trace_command(app);
  try {
    // CLI11 would only say that a subcommand is required.
    std::vector<std::string> names;
    for (const CLI::App* command : app.get_subcommands({})) names.push_back(command->get_name());
    if (argc > 1 && argv[1][0] != '-' && std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      throw CLI::ValidationError(
          fmt::format("unknown subcommand '{}'; the subcommands are {}", argv[1], fmt::join(names, ", ")));
    }
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    fmt::print(stderr, "opara-bench: {}\nRun with --help for usage.\n", error.what());
    return kUsageError;
  } catch (const opara::Error& error) {
    fmt::print(stderr, "opara-bench: {}\n", error.what());
    return kFailure;
  } catch (const c10::Error& error) {  // from LibTorch, with no opara context: at least no C++ backtrace
    fmt::print(stderr, "opara-bench: unexpected error: {}\n", error.what_without_backtrace());
    return kFailure;
  } catch (const std::exception& error) {
    fmt::print(stderr, "opara-bench: unexpected error: {}\n", error.what());
    return kFailure;
  }
  return 0;
}
