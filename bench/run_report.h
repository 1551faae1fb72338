#pragma once

// The printers of `run`, one set for both devices: the table, the JSON and the CSV are made from the
// measured modes (mode_result.h) alone, each speedup taken the one way speedup() takes it.

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

#include "mode_result.h"

namespace opara::bench {

// A row per reported mode: median, p10, p90, speedups over sequential and eager, the outputs'
// differences, bitwise equality and peak memory where some mode has them, and its schedule; then how
// the modes were timed and the measuring's notes.
void print_modes_table(std::FILE* table, const MeasuredModes& measured);

// `header` (the run's model, device, inputs, ...) with `rounds` and `modes`: an object per reported
// mode with the same keys on both devices (null where a device does not measure one) and its figures.
nlohmann::json report_json(const nlohmann::json& header, const MeasuredModes& measured);

// --json (empty: none): the whole report; --csv: a row per mode, the run's model and device in each.
void write_reports(const nlohmann::json& report, const std::string& json_path, const std::string& csv_path);

}  // namespace opara::bench
