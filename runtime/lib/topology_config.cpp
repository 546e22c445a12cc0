// Parser for the explicit tier description (HYBRIDGEN_TIERS / config files).
#include "hybridgen/runtime/topology.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace hybridgen::rt {

namespace {

/// Bounds on what a tier description may make the runtime hold: config text is tiny in practice,
/// so anything larger is a mistake (a wrong path, /dev/zero) and must not grow memory unbounded.
constexpr size_t kMaxConfigBytes = 1u << 20;
constexpr size_t kMaxTiers = 64;
constexpr int64_t kMaxNumaNode = 4095; // libnuma's largest node id on any kernel config

std::string trim(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace((unsigned char)s[b]))
    ++b;
  while (e > b && std::isspace((unsigned char)s[e - 1]))
    --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (auto &c : s)
    c = char(std::tolower((unsigned char)c));
  return s;
}

/// A finite, positive number (no nan/inf, no hex floats): bandwidths are divisors downstream.
Result<double> parsePositiveNumber(const std::string &key, const std::string &v) {
  // Decimal notation only: strtod would also take "nan", "inf" and hex floats.
  bool decimal = !v.empty() && v.find_first_not_of("0123456789.eE+-") == std::string::npos;
  char *end = nullptr;
  errno = 0;
  double d = decimal ? std::strtod(v.c_str(), &end) : 0;
  if (!decimal || *end != '\0' || errno == ERANGE || !std::isfinite(d) || d <= 0 || d > 1e9)
    return invalidArgument("tier config: '" + key + "' needs a finite number in (0, 1e9], got '" +
                           v + "'");
  return d;
}

/// A decimal integer in [lo, hi], parsed as an integer: "1e300", "nan", "2.5" or "-7" for a field
/// that cannot take them are errors, never a float cast to int.
Result<int64_t> parseInteger(const std::string &key, const std::string &v, int64_t lo, int64_t hi) {
  char *end = nullptr;
  errno = 0;
  long long x = 0;
  bool digits = !v.empty() && (std::isdigit((unsigned char)v[0]) ||
                               (v.size() > 1 && v[0] == '-' && std::isdigit((unsigned char)v[1])));
  if (digits)
    x = std::strtoll(v.c_str(), &end, 10);
  if (!digits || *end != '\0' || errno == ERANGE || x < lo || x > hi)
    return invalidArgument("tier config: '" + key + "' needs an integer in [" + std::to_string(lo) +
                           ", " + std::to_string(hi) + "], got '" + v + "'");
  return int64_t(x);
}

Result<bool> parseFlag(const std::string &key, const std::string &v) {
  std::string l = lower(v);
  if (l == "1" || l == "true" || l == "yes")
    return true;
  if (l == "0" || l == "false" || l == "no")
    return false;
  return invalidArgument("tier config: '" + key + "' needs 0|1|true|false|yes|no, got '" + v + "'");
}

Result<TierInfo> parseEntry(const std::string &entry) {
  TierInfo tier;
  bool haveKind = false;
  std::stringstream fields(entry);
  std::string field;
  while (std::getline(fields, field, ',')) {
    field = trim(field);
    if (field.empty())
      continue;
    size_t eq = field.find('=');
    if (eq == std::string::npos)
      return invalidArgument("tier config: expected key=value, got '" + field + "'");
    std::string key = lower(trim(field.substr(0, eq))), val = trim(field.substr(eq + 1));
    if (key == "name") {
      tier.name = val;
    } else if (key == "kind") {
      std::string k = lower(val);
      if (k == "hbm")
        tier.kind = TierKind::kHbm;
      else if (k == "dram")
        tier.kind = TierKind::kDram;
      else if (k == "far" || k == "cxl")
        tier.kind = TierKind::kFar;
      else
        return invalidArgument("tier config: unknown kind '" + val + "' (hbm|dram|far|cxl)");
      haveKind = true;
    } else if (key == "node") {
      // Node ids index libnuma bitmasks; fromTiers checks that the node exists.
      auto n = parseInteger(key, val, 0, kMaxNumaNode);
      if (!n)
        return n.status();
      tier.numaNode = int32_t(*n);
    } else if (key == "capacity" || key == "cap") {
      auto b = parseByteSize(val);
      if (!b)
        return b.status();
      tier.capacityBytes = *b;
    } else if (key == "bandwidth" || key == "bw") {
      auto n = parsePositiveNumber(key, val);
      if (!n)
        return n.status();
      tier.readGBs = *n;
      tier.bandwidthSource = BandwidthSource::kConfig;
    } else if (key == "device") {
      std::string d = lower(val);
      if (d != "cuda" && d != "host")
        return invalidArgument("tier config: unknown device '" + val + "' (cuda|host)");
      tier.wantsDevice = d == "cuda";
    } else if (key == "emulated") {
      auto f = parseFlag(key, val);
      if (!f)
        return f.status();
      tier.emulated = *f;
    } else {
      return invalidArgument("tier config: unknown key '" + key + "'");
    }
  }
  if (!haveKind)
    return invalidArgument("tier config: entry '" + entry + "' has no kind=");
  if (tier.name.empty())
    tier.name = tierKindName(tier.kind);
  // Host tiers default to node 0 so a 1-node machine needs no node= at all.
  if (tier.numaNode < 0 && tier.kind != TierKind::kHbm)
    tier.numaNode = 0;
  return tier;
}

} // namespace

Result<uint64_t> parseByteSize(const std::string &text) {
  std::string t = trim(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit((unsigned char)t[i]) || t[i] == '.'))
    ++i;
  std::string number = t.substr(0, i);
  char *end = nullptr;
  double num = number.empty() ? 0 : std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0')
    return invalidArgument("bad byte size '" + text + "'");
  std::string suf = lower(trim(t.substr(i)));
  double mul = 1;
  if (suf.empty() || suf == "b")
    mul = 1;
  else if (suf == "k" || suf == "kib" || suf == "kb")
    mul = 1024.0;
  else if (suf == "m" || suf == "mib" || suf == "mb")
    mul = 1024.0 * 1024;
  else if (suf == "g" || suf == "gib" || suf == "gb")
    mul = 1024.0 * 1024 * 1024;
  else if (suf == "t" || suf == "tib" || suf == "tb")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else
    return invalidArgument("bad byte size suffix in '" + text + "'");
  // A plain integer is taken exactly (doubles round above 2^53); anything else goes through the
  // double, range-checked first because an out-of-range float-to-int cast is undefined.
  if (number.find('.') == std::string::npos && mul == 1) {
    errno = 0;
    unsigned long long exact = std::strtoull(number.c_str(), &end, 10);
    if (errno == ERANGE)
      return invalidArgument("byte size '" + text + "' exceeds 2^64 - 1");
    return uint64_t(exact);
  }
  double bytes = num * mul;
  if (!(bytes < 18446744073709551616.0))
    return invalidArgument("byte size '" + text + "' exceeds 2^64 - 1");
  return uint64_t(bytes);
}

Result<Topology> Topology::fromConfig(const std::string &text, const DiscoverOptions &opts) {
  if (text.size() > kMaxConfigBytes)
    return invalidArgument("tier config: " + std::to_string(text.size()) + " bytes exceed the " +
                           std::to_string(kMaxConfigBytes) + "-byte limit");
  std::vector<TierInfo> tiers;
  std::string cleaned;
  // Strip comments line by line, then treat newlines like ';'.
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    size_t hash = line.find('#');
    if (hash != std::string::npos)
      line.resize(hash);
    cleaned += line + ";";
  }
  std::stringstream entries(cleaned);
  std::string entry;
  while (std::getline(entries, entry, ';')) {
    if (trim(entry).empty())
      continue;
    auto tier = parseEntry(entry);
    if (!tier)
      return tier.status();
    tiers.push_back(std::move(*tier));
    if (tiers.size() > kMaxTiers)
      return invalidArgument("tier config: more than " + std::to_string(kMaxTiers) + " tiers");
  }
  if (tiers.empty())
    return invalidArgument("tier config: no tiers described");
  return fromTiers(std::move(tiers), opts);
}

Result<Topology> Topology::fromConfigFile(const std::string &path, const DiscoverOptions &opts) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer. Only regular files are read, and at most
  // kMaxConfigBytes + 1 bytes of them (st_size may lie, e.g. for /proc files or a growing file).
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return notFound("tier config: cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalidArgument("tier config: '" + path + "' is not a regular file");
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      int err = errno;
      ::close(fd);
      return systemError("tier config: reading '" + path + "' failed: " + std::strerror(err));
    }
    if (got == 0)
      break;
    text.append(buf, size_t(got));
    if (text.size() > kMaxConfigBytes) {
      ::close(fd);
      return invalidArgument("tier config: '" + path + "' is larger than the " +
                             std::to_string(kMaxConfigBytes) + "-byte limit");
    }
  }
  ::close(fd);
  return fromConfig(text, opts);
}

Result<Topology> Topology::fromEnvironment(const DiscoverOptions &opts) {
  if (const char *text = std::getenv("HYBRIDGEN_TIERS"); text && *text)
    return fromConfig(text, opts);
  if (const char *path = std::getenv("HYBRIDGEN_TIERS_FILE"); path && *path)
    return fromConfigFile(path, opts);
  return discover(opts);
}

} // namespace hybridgen::rt
