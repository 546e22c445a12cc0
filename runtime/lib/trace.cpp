// Trace: CSV rendering and column extraction.
#include "hybridgen/runtime/trace.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace hybridgen::rt {

namespace {
const char *kFixed[] = {"step", "segment", "context_tokens", "split", "cpu_s", "gpu_s",
                        "transfer_s", "segment_s", "migrations", "modelled_devices"};

double fixedValue(const TraceRow &r, size_t i) {
  switch (i) {
  case 0: return double(r.step);
  case 1: return double(r.segment);
  case 2: return double(r.contextTokens);
  case 3: return double(r.split);
  case 4: return r.cpuSeconds;
  case 5: return r.gpuSeconds;
  case 6: return r.transferSeconds;
  case 7: return r.segmentSeconds;
  case 8: return double(r.migrations);
  default: return double(r.modelledDevices);
  }
}
constexpr size_t kNumFixed = sizeof(kFixed) / sizeof(kFixed[0]);
} // namespace

std::vector<std::string> Trace::columnNames() const {
  std::vector<std::string> names(std::begin(kFixed), std::end(kFixed));
  for (const auto &t : tierNames_)
    names.push_back("blocks_" + t);
  return names;
}

std::vector<double> Trace::column(const std::string &name) const {
  std::vector<double> out;
  auto names = columnNames();
  for (size_t c = 0; c < names.size(); ++c) {
    if (names[c] != name)
      continue;
    out.reserve(rows_.size());
    for (const auto &r : rows_) {
      if (c < kNumFixed)
        out.push_back(fixedValue(r, c));
      else
        out.push_back(c - kNumFixed < r.tierBlocks.size() ? double(r.tierBlocks[c - kNumFixed]) : 0.0);
    }
  }
  return out;
}

std::string Trace::toCsv() const {
  std::ostringstream os;
  auto names = columnNames();
  for (size_t c = 0; c < names.size(); ++c)
    os << (c ? "," : "") << names[c];
  os << "\n";
  char buf[64];
  for (const auto &r : rows_) {
    for (size_t c = 0; c < names.size(); ++c) {
      double v = c < kNumFixed ? fixedValue(r, c)
                               : (c - kNumFixed < r.tierBlocks.size() ? double(r.tierBlocks[c - kNumFixed]) : 0.0);
      bool isTime = c >= 4 && c <= 7;
      std::snprintf(buf, sizeof buf, isTime ? "%.9g" : "%.0f", v);
      os << (c ? "," : "") << buf;
    }
    os << "\n";
  }
  return os.str();
}

Status Trace::writeCsv(const std::string &path) const {
  std::ofstream out(path);
  if (!out)
    return systemError("trace: cannot write '" + path + "'");
  out << toCsv();
  return out ? Status::ok() : systemError("trace: write to '" + path + "' failed");
}

} // namespace hybridgen::rt
