// Parser for the explicit tier description (HYBRIDGEN_TIERS / config files).
#include "hybridgen/runtime/topology.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hybridgen::rt {

namespace {

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

Result<double> parseNumber(const std::string &key, const std::string &v) {
  char *end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0')
    return invalidArgument("tier config: '" + key + "' needs a number, got '" + v + "'");
  return d;
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
      auto n = parseNumber(key, val);
      if (!n)
        return n.status();
      tier.numaNode = int32_t(*n);
    } else if (key == "capacity" || key == "cap") {
      auto b = parseByteSize(val);
      if (!b)
        return b.status();
      tier.capacityBytes = *b;
    } else if (key == "bandwidth" || key == "bw") {
      auto n = parseNumber(key, val);
      if (!n)
        return n.status();
      if (*n <= 0)
        return invalidArgument("tier config: bandwidth must be > 0");
      tier.readGBs = *n;
      tier.bandwidthSource = BandwidthSource::kConfig;
    } else if (key == "device") {
      std::string d = lower(val);
      if (d != "cuda" && d != "host")
        return invalidArgument("tier config: unknown device '" + val + "' (cuda|host)");
      tier.wantsDevice = d == "cuda";
    } else if (key == "emulated") {
      tier.emulated = val == "1" || lower(val) == "true" || lower(val) == "yes";
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
  if (i == 0)
    return invalidArgument("bad byte size '" + text + "'");
  double num = std::strtod(t.substr(0, i).c_str(), nullptr);
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
  return uint64_t(num * mul);
}

Result<Topology> Topology::fromConfig(const std::string &text, const DiscoverOptions &opts) {
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
  }
  if (tiers.empty())
    return invalidArgument("tier config: no tiers described");
  return fromTiers(std::move(tiers), opts);
}

Result<Topology> Topology::fromConfigFile(const std::string &path, const DiscoverOptions &opts) {
  std::ifstream in(path);
  if (!in)
    return notFound("tier config: cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return fromConfig(ss.str(), opts);
}

Result<Topology> Topology::fromEnvironment(const DiscoverOptions &opts) {
  if (const char *text = std::getenv("HYBRIDGEN_TIERS"); text && *text)
    return fromConfig(text, opts);
  if (const char *path = std::getenv("HYBRIDGEN_TIERS_FILE"); path && *path)
    return fromConfigFile(path, opts);
  return discover(opts);
}

} // namespace hybridgen::rt
