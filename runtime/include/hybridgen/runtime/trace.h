// Per-step scheduler trace: split, times, tier occupancy, migrations; CSV for tools, columns for Python.
#pragma once

#include "hybridgen/runtime/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hybridgen::rt {

struct TraceRow {
  int64_t step = 0;
  int64_t segment = 0;
  int64_t contextTokens = 0;
  int64_t split = 0;
  double cpuSeconds = 0;
  double gpuSeconds = 0;
  double transferSeconds = 0;
  double segmentSeconds = 0;      // wall time between segment begin and end (0 if fed directly)
  int64_t migrations = 0;         // blocks migrated since the previous row
  int32_t modelledDevices = 0;    // bit d set: device d's time is a cost model's, not measured
  std::vector<int64_t> tierBlocks; // used blocks per tier, in tier order
};

class Trace {
public:
  /// Names used for the per-tier columns ("blocks_<name>"); emulated tiers get an "_emulated" suffix.
  void setTierNames(std::vector<std::string> names) { tierNames_ = std::move(names); }
  void add(TraceRow row) { rows_.push_back(std::move(row)); }
  void clear() { rows_.clear(); }
  const std::vector<TraceRow> &rows() const { return rows_; }
  size_t size() const { return rows_.size(); }

  std::vector<std::string> columnNames() const;
  /// One numeric column by name (for numpy); empty when the name is unknown.
  std::vector<double> column(const std::string &name) const;
  std::string toCsv() const;
  Status writeCsv(const std::string &path) const;

private:
  std::vector<std::string> tierNames_;
  std::vector<TraceRow> rows_;
};

} // namespace hybridgen::rt
