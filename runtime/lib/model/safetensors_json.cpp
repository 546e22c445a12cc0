// Safetensors headers and indexes through nlohmann-json's SAX interface. No DOM is built: a DOM of a
// hostile 100 MB header took gigabytes, and nlohmann's callback parser (the only way to see
// duplicate keys with a DOM) rescans the parent at every child's end, quadratic in the tensors.
#include "safetensors_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace hybridgen::rt::safetensors_json {

namespace {

using json = nlohmann::json;

/// numpy's and PyTorch's dimension limit; more is corruption.
constexpr size_t kMaxRank = 64;

enum class Kind { null, boolean, integer, unsignedInt, floating, string, binary, objectStart,
                  objectEnd, arrayStart, arrayEnd, key };

/// One SAX event: its kind, the value of an unsigned integer, the text of a string or key (or a
/// readable rendering of any other value, for messages).
struct Token {
  Kind kind;
  uint64_t u = 0;
  std::string text;
};

bool isStart(Kind k) { return k == Kind::objectStart || k == Kind::arrayStart; }
bool isEnd(Kind k) { return k == Kind::objectEnd || k == Kind::arrayEnd; }

/// Bounded, quoted rendering of untrusted text for a message.
std::string quote(const std::string &s) {
  constexpr size_t kMax = 200;
  return "'" + (s.size() <= kMax ? s : s.substr(0, kMax) + "...") + "'";
}

std::string describe(const Token &t) { return t.kind == Kind::string ? quote(t.text) : t.text; }

/// Turns nlohmann's SAX callbacks into Tokens for a state machine, and skips whole values on demand
/// (nesting costs the parser one bit per level, so skipping needs no depth limit).
class TokenSax : public json::json_sax_t {
public:
  explicit TokenSax(const char *what) : what_(what) {}
  const std::string &error() const { return error_; }
  const char *what() const { return what_; }

  bool null() override { return feed({Kind::null, 0, "null"}); }
  bool boolean(bool v) override { return feed({Kind::boolean, 0, v ? "true" : "false"}); }
  bool number_integer(json::number_integer_t v) override {
    return feed({Kind::integer, 0, std::to_string(v)});
  }
  bool number_unsigned(json::number_unsigned_t v) override {
    return feed({Kind::unsignedInt, v, std::to_string(v)});
  }
  bool number_float(json::number_float_t, const json::string_t &literal) override {
    return feed({Kind::floating, 0, literal});
  }
  bool string(json::string_t &v) override { return feed({Kind::string, 0, std::move(v)}); }
  bool binary(json::binary_t &) override { return feed({Kind::binary, 0, "binary data"}); }
  bool start_object(std::size_t) override { return feed({Kind::objectStart, 0, "an object"}); }
  bool key(json::string_t &v) override { return feed({Kind::key, 0, std::move(v)}); }
  bool end_object() override { return feed({Kind::objectEnd, 0, "}"}); }
  bool start_array(std::size_t) override { return feed({Kind::arrayStart, 0, "an array"}); }
  bool end_array() override { return feed({Kind::arrayEnd, 0, "]"}); }
  bool parse_error(std::size_t, const std::string &, const json::exception &ex) override {
    if (error_.empty())
      error_ = std::string(what_) + " is not valid JSON: " + ex.what();
    return false;
  }

protected:
  virtual bool on(Token &t) = 0;
  bool fail(std::string message) {
    error_ = std::move(message);
    return false;
  }
  /// Skips the value that |first| begins (all of it when it opens an object or array).
  void skipValue(const Token &first) { skipDepth_ = isStart(first.kind) ? 1 : 0; }

private:
  bool feed(Token t) {
    if (skipDepth_ > 0) {
      if (isStart(t.kind))
        ++skipDepth_;
      else if (isEnd(t.kind))
        --skipDepth_;
      return true;
    }
    return on(t);
  }

  const char *what_;
  std::string error_;
  size_t skipDepth_ = 0;
};

/// {name: {"dtype": s, "shape": [n...], "data_offsets": [b, e]}, "__metadata__": {s: s}}; unknown
/// keys inside an entry are skipped (as the reference reader does), duplicated keys refused.
class HeaderSax : public TokenSax {
public:
  explicit HeaderSax(std::vector<HeaderEntry> &out) : TokenSax("header"), out_(out) {}

private:
  enum class State { root, rootKey, rootValue, metaKey, metaValue, entryKey, entryValue, shape,
                     offsets, done };
  enum Field : unsigned { kUnknown = 0, kDtype = 1, kShape = 2, kOffsets = 4 };

  std::string where() const { return "tensor " + quote(entry_.name) + ": "; }
  bool failOffsets() { return fail(where() + "'data_offsets' must be an array [begin, end]"); }

  bool on(Token &t) override {
    switch (state_) {
    case State::root:
      if (t.kind != Kind::objectStart)
        return fail("header is not a JSON object");
      state_ = State::rootKey;
      return true;
    case State::rootKey:  // a key or the root's end: the grammar allows nothing else here
      if (t.kind == Kind::objectEnd) {
        state_ = State::done;
        return true;
      }
      entry_ = HeaderEntry{};
      entry_.name = std::move(t.text);
      state_ = State::rootValue;
      return true;
    case State::rootValue:
      if (entry_.name == "__metadata__") {
        if (t.kind != Kind::objectStart)
          return fail("'__metadata__' must map strings to strings");
        state_ = State::metaKey;
        return true;
      }
      if (t.kind != Kind::objectStart)
        return fail(where() + "header entry is not an object");
      seen_ = 0;
      state_ = State::entryKey;
      return true;
    case State::metaKey:
      state_ = t.kind == Kind::objectEnd ? State::rootKey : State::metaValue;
      return true;
    case State::metaValue:
      if (t.kind != Kind::string)
        return fail("'__metadata__' must map strings to strings");
      state_ = State::metaKey;
      return true;
    case State::entryKey:
      if (t.kind == Kind::objectEnd)
        return finishEntry();
      field_ = t.text == "dtype" ? kDtype : t.text == "shape" ? kShape
               : t.text == "data_offsets" ? kOffsets : kUnknown;
      if (field_ & seen_)
        return fail(where() + quote(t.text) + " appears twice");
      seen_ |= field_;
      state_ = State::entryValue;
      return true;
    case State::entryValue:
      state_ = State::entryKey;
      if (field_ == kUnknown) {
        skipValue(t);
        return true;
      }
      if (field_ == kDtype) {
        if (t.kind != Kind::string)
          return fail(where() + "missing or non-string 'dtype'");
        entry_.dtype = std::move(t.text);
        return true;
      }
      if (field_ == kShape) {
        if (t.kind != Kind::arrayStart)
          return fail(where() + "missing or non-array 'shape'");
        state_ = State::shape;
        return true;
      }
      if (t.kind != Kind::arrayStart)
        return failOffsets();
      offsetCount_ = 0;
      state_ = State::offsets;
      return true;
    case State::shape:
      if (t.kind == Kind::arrayEnd) {
        state_ = State::entryKey;
        return true;
      }
      if (t.kind != Kind::unsignedInt || t.u > uint64_t(INT64_MAX))
        return fail(where() + "shape entries must be integers in [0, 2^63), got " + describe(t));
      if (entry_.shape.size() == kMaxRank)
        return fail(where() + "shape has more than " + std::to_string(kMaxRank) + " dimensions");
      entry_.shape.push_back(int64_t(t.u));
      return true;
    case State::offsets:
      if (t.kind == Kind::arrayEnd) {
        state_ = State::entryKey;
        return offsetCount_ == 2 ? true : failOffsets();
      }
      if (t.kind != Kind::unsignedInt)
        return fail(where() + "'data_offsets' entries must be non-negative integers, got " +
                    describe(t));
      if (offsetCount_ == 2)
        return failOffsets();
      (offsetCount_++ == 0 ? entry_.begin : entry_.end) = t.u;
      return true;
    case State::done:
      break;
    }
    return fail("header has content after its object");  // the parser reports this first
  }

  bool finishEntry() {
    if (!(seen_ & kDtype))
      return fail(where() + "missing or non-string 'dtype'");
    if (!(seen_ & kShape))
      return fail(where() + "missing or non-array 'shape'");
    if (!(seen_ & kOffsets))
      return failOffsets();
    out_.push_back(std::move(entry_));
    state_ = State::rootKey;
    return true;
  }

  std::vector<HeaderEntry> &out_;
  HeaderEntry entry_;
  State state_ = State::root;
  unsigned field_ = kUnknown, seen_ = 0;
  int offsetCount_ = 0;
};

/// {"weight_map": {name: file}, anything else}; only weight_map is kept.
class IndexSax : public TokenSax {
public:
  explicit IndexSax(std::vector<std::pair<std::string, std::string>> &out)
      : TokenSax("index"), out_(out) {}
  bool sawWeightMap() const { return sawWeightMap_; }

private:
  enum class State { root, rootKey, otherValue, mapValue, mapKey, mapFile, done };

  bool on(Token &t) override {
    switch (state_) {
    case State::root:
      if (t.kind != Kind::objectStart)
        return fail("index is not a JSON object");
      state_ = State::rootKey;
      return true;
    case State::rootKey:
      if (t.kind == Kind::objectEnd) {
        state_ = State::done;
        return true;
      }
      if (t.text != "weight_map") {
        state_ = State::otherValue;
        return true;
      }
      if (sawWeightMap_)
        return fail("index has 'weight_map' twice");
      sawWeightMap_ = true;
      state_ = State::mapValue;
      return true;
    case State::otherValue:
      skipValue(t);
      state_ = State::rootKey;
      return true;
    case State::mapValue:
      if (t.kind != Kind::objectStart)
        return fail("index has a non-object 'weight_map'");
      state_ = State::mapKey;
      return true;
    case State::mapKey:
      if (t.kind == Kind::objectEnd) {
        state_ = State::rootKey;
        return true;
      }
      if (!names_.insert(t.text).second)
        return fail("index lists tensor " + quote(t.text) + " twice in 'weight_map'");
      name_ = std::move(t.text);
      state_ = State::mapFile;
      return true;
    case State::mapFile:
      if (t.kind != Kind::string)
        return fail("index: weight_map entry for tensor " + quote(name_) + " is not a file name, got " +
                    describe(t));
      out_.emplace_back(std::move(name_), std::move(t.text));
      state_ = State::mapKey;
      return true;
    case State::done:
      break;
    }
    return fail("index has content after its object");
  }

  std::vector<std::pair<std::string, std::string>> &out_;
  std::set<std::string> names_;
  std::string name_;
  State state_ = State::root;
  bool sawWeightMap_ = false;
};

Status run(TokenSax &sax, const char *begin, const char *end) {
  bool ok = false;
  try {
    ok = json::sax_parse(begin, end, &sax);  // strict: anything after the value is an error
  } catch (const json::exception &e) {
    return invalidArgument(std::string(sax.what()) + " is not valid JSON: " + e.what());
  }
  if (!ok || !sax.error().empty())
    return invalidArgument(sax.error().empty() ? std::string(sax.what()) + " is not valid JSON"
                                               : sax.error());
  return Status::ok();
}

} // namespace

Status parseHeader(const char *begin, const char *end, std::vector<HeaderEntry> &out) {
  HeaderSax sax(out);
  Status s = run(sax, begin, end);
  if (!s)
    return s;
  // A DOM would keep only the last of duplicated keys and hide a tensor entry; sorting pointers
  // finds duplicates without a second copy of every name.
  std::vector<const std::string *> names;
  names.reserve(out.size());
  for (const HeaderEntry &e : out)
    names.push_back(&e.name);
  std::sort(names.begin(), names.end(),
            [](const std::string *a, const std::string *b) { return *a < *b; });
  for (size_t i = 1; i < names.size(); ++i)
    if (*names[i] == *names[i - 1])
      return invalidArgument("tensor " + quote(*names[i]) + " appears twice in the header");
  return Status::ok();
}

Status parseIndex(const char *begin, const char *end,
                  std::vector<std::pair<std::string, std::string>> &weightMap) {
  IndexSax sax(weightMap);
  Status s = run(sax, begin, end);
  if (s && !sax.sawWeightMap())
    return invalidArgument("index has no 'weight_map'");
  return s;
}

} // namespace hybridgen::rt::safetensors_json
