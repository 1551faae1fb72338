#include "run_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <optional>
#include <vector>

#include "csv_output.h"
#include "json_output.h"
#include "support/percentile.h"

namespace opara::bench {
namespace {

// What both printers show of a mode: its result and what is derived from the run's other modes.
struct ModeRow {
  const ModeResult* result = nullptr;
  std::vector<double> samples_ms;
  std::optional<double> vs_sequential;
  std::optional<double> vs_eager;
  std::optional<double> vs_nimble;
  std::optional<std::vector<double>> vs_eager_by_round;
  std::optional<double> peak_vs_sequential;      // what its streams cost in memory: its peak over sequential's
  std::optional<double> run_peak_vs_sequential;  // and in serving: its runs' peak over sequential's
};

std::optional<double> speedup_over(const ModeResult& mode, const ModeResult* baseline) {
  return baseline ? std::optional<double>(speedup(mode, *baseline)) : std::nullopt;
}

std::optional<double> ratio_to_sequential(std::optional<std::size_t> bytes, std::optional<std::size_t> sequential) {
  if (!bytes || sequential.value_or(0) == 0) return std::nullopt;
  return static_cast<double>(*bytes) / static_cast<double>(*sequential);
}

std::vector<ModeRow> mode_rows(const std::vector<ModeResult>& modes) {
  const ModeResult* sequential = find_mode(modes, "sequential");
  const ModeResult* eager = find_mode(modes, "eager");
  std::vector<ModeRow> rows;
  for (const ModeResult& mode : modes) {
    if (!mode.reported) continue;
    ModeRow& row = rows.emplace_back();
    row.result = &mode;
    row.samples_ms = mode.samples_ms();
    row.vs_sequential = speedup_over(mode, sequential);
    row.vs_eager = speedup_over(mode, eager);
    row.vs_nimble = speedup_over(mode, find_mode(modes, "nimble"));
    if (eager) row.vs_eager_by_round = speedups_by_round(mode, *eager);
    row.peak_vs_sequential = ratio_to_sequential(mode.peak_bytes, sequential ? sequential->peak_bytes : std::nullopt);
    row.run_peak_vs_sequential =
        ratio_to_sequential(mode.run_peak_bytes, sequential ? sequential->run_peak_bytes : std::nullopt);
  }
  return rows;
}

template <typename T>
nlohmann::json or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json mode_json(const ModeRow& row) {
  const ModeResult& mode = *row.result;
  nlohmann::json entry = {{"mode", mode.mode},
                          {"median_ms", percentile(row.samples_ms, 0.5)},
                          {"p10_ms", percentile(row.samples_ms, 0.1)},
                          {"p90_ms", percentile(row.samples_ms, 0.9)},
                          {"samples_ms", row.samples_ms},
                          {"speedup_vs_sequential", or_null(row.vs_sequential)},
                          {"speedup_vs_eager", or_null(row.vs_eager)},
                          {"speedup_vs_nimble", or_null(row.vs_nimble)},
                          {"speedup_vs_eager_by_round", or_null(row.vs_eager_by_round)},
                          {"max_abs_diff", or_null(mode.check.max_abs_diff)},
                          {"max_rel_diff", or_null(mode.check.max_rel_diff)},
                          {"bitwise_equal", or_null(mode.check.bitwise_equal)},
                          {"bitwise_equal_eager_same_threads", or_null(mode.check.bitwise_equal_eager_same_threads)},
                          {"peak_bytes", or_null(mode.peak_bytes)},
                          {"peak_vs_sequential", or_null(row.peak_vs_sequential)},
                          {"run_peak_bytes", or_null(mode.run_peak_bytes)},
                          {"run_peak_vs_sequential", or_null(row.run_peak_vs_sequential)},
                          {"peak_live_values", or_null(mode.peak_live_values)}};
  entry.update(mode.figures);
  return entry;
}

// A column of the table: a cell per row, empty where the row has no value ("n/a"); a column no row
// has a value in is left out unless `always`.
struct Column {
  std::string header;
  int width;
  bool always;
  std::function<std::optional<std::string>(const ModeRow&)> cell;
};

std::optional<std::string> number(std::optional<double> value, const char* format) {
  return value ? std::optional<std::string>(fmt::format(fmt::runtime(format), *value)) : std::nullopt;
}

std::optional<std::string> mebibytes(std::optional<std::size_t> bytes) {
  return number(bytes ? std::optional<double>(static_cast<double>(*bytes) / (1 << 20)) : std::nullopt, "{:.1f}");
}

std::optional<std::string> bitwise_cell(const OutputsCheck& check) {
  if (check.bitwise_equal_eager_same_threads) return *check.bitwise_equal_eager_same_threads ? "no*" : "NO";
  if (!check.bitwise_equal) return std::nullopt;
  return *check.bitwise_equal ? "yes" : "no";
}

std::vector<Column> table_columns() {
  const auto percentile_ms = [](double fraction) {
    return [fraction](const ModeRow& row) { return number(percentile(row.samples_ms, fraction), "{:.3f}"); };
  };
  return {
      {"median ms", 10, true, percentile_ms(0.5)},
      {"p10 ms", 9, true, percentile_ms(0.1)},
      {"p90 ms", 9, true, percentile_ms(0.9)},
      {"vs seq", 8, true, [](const ModeRow& row) { return number(row.vs_sequential, "{:.2f}x"); }},
      {"vs eager", 8, true, [](const ModeRow& row) { return number(row.vs_eager, "{:.2f}x"); }},
      {"max |diff|", 11, true, [](const ModeRow& row) { return number(row.result->check.max_abs_diff, "{:.3g}"); }},
      {"max rel", 10, false, [](const ModeRow& row) { return number(row.result->check.max_rel_diff, "{:.3g}"); }},
      {"bitwise", 8, false, [](const ModeRow& row) { return bitwise_cell(row.result->check); }},
      {"peak MiB", 9, false, [](const ModeRow& row) { return mebibytes(row.result->peak_bytes); }},
      {"run MiB", 8, false, [](const ModeRow& row) { return mebibytes(row.result->run_peak_bytes); }},
  };
}

// The columns some row has a value in, and those always shown.
std::vector<Column> shown_columns(const std::vector<ModeRow>& rows) {
  std::vector<Column> shown;
  for (Column& column : table_columns()) {
    const bool any = std::any_of(rows.begin(), rows.end(), [&](const ModeRow& row) { return column.cell(row); });
    if (column.always || any) shown.push_back(std::move(column));
  }
  return shown;
}

// How the modes were timed, which says what a speedup is.
std::string timing_note(const MeasuredModes& measured) {
  const ModeResult& first = measured.modes.front();
  const std::size_t rounds = first.rounds_ms.size();
  const std::size_t runs = first.samples_ms().size();
  if (rounds == 1)
    return fmt::format("each mode timed in one block of {} runs; a speedup is the ratio of the medians", runs);
  return fmt::format(
      "timed in {} interleaved round(s) of about {} runs per mode; a speedup is the median over rounds of the ratio "
      "within a round",
      rounds, runs / rounds);
}

}  // namespace

void print_modes_table(std::FILE* table, const MeasuredModes& measured) {
  const std::vector<ModeRow> rows = mode_rows(measured.modes);
  const std::vector<Column> columns = shown_columns(rows);
  std::string header = fmt::format("\n{:<15}", "mode");
  for (const Column& column : columns) header += fmt::format(" {:>{}}", column.header, column.width);
  fmt::print(table, "{}  schedule\n", header);
  for (const ModeRow& row : rows) {
    std::string line = fmt::format("{:<15}", row.result->mode);
    for (const Column& column : columns) line += fmt::format(" {:>{}}", column.cell(row).value_or("n/a"), column.width);
    fmt::print(table, "{}  {}\n", line, row.result->schedule);
  }
  fmt::print(table, "\n{}\n", timing_note(measured));
  for (const std::string& note : measured.notes) fmt::print(table, "\n{}\n", note);
}

nlohmann::json report_json(const nlohmann::json& header, const MeasuredModes& measured) {
  nlohmann::json report = header;
  report["rounds"] = measured.modes.front().rounds_ms.size();
  report["modes"] = nlohmann::json::array();
  for (const ModeRow& row : mode_rows(measured.modes)) report["modes"].push_back(mode_json(row));
  return report;
}

void write_reports(const nlohmann::json& report, const std::string& json_path, const std::string& csv_path) {
  if (!json_path.empty()) write_json(report, json_path);
  if (csv_path.empty()) return;
  std::vector<nlohmann::json> rows;
  for (nlohmann::json row : report.at("modes")) {
    row["model"] = report.at("model");
    row["device"] = report.at("device");
    rows.push_back(std::move(row));
  }
  write_csv(rows, {"model", "device", "mode", "median_ms", "speedup_vs_sequential", "speedup_vs_eager"}, csv_path);
}

}  // namespace opara::bench
