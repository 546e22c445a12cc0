//===- InputGuard.h - refuse MLIR text the upstream parser cannot survive ----*- C++ -*-===//
//
// MLIR's parser recurses once per nested region, block, type or attribute and has no depth limit
// (MLIR 22's ParserConfig offers none): 5,000 nested `scf.execute_region` overflow an 8 MiB
// stack. The driver and the tools therefore scan the text first and refuse nesting deeper than
// kMaxNestingDepth brackets, and NUL bytes (the lexer stops at the first one, so an all-NUL file
// used to parse as an empty module), with a file:line:col diagnostic. The scan is linear, keeps
// no more than one byte per open bracket, and knows MLIR's string literals and `//` comments.
// Header-only and MLIR-free: hybridgen-opt uses it without the driver library.
//
//===----------------------------------------------------------------------===//
#ifndef HYBRIDGEN_DRIVER_INPUTGUARD_H
#define HYBRIDGEN_DRIVER_INPUTGUARD_H

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hybridgen::driver {

/// Deepest bracket nesting ({, (, [, <) accepted. Real modules stay below 30; the parser, the
/// verifier and the passes were measured to survive 2,000 nested regions on an 8 MiB stack.
constexpr size_t kMaxNestingDepth = 512;

/// Why the text was refused and where (line and column from 1).
struct InputProblem {
  size_t line = 1, column = 1;
  std::string message;
};

/// The first reason |text| must not reach the parser, if any.
inline std::optional<InputProblem> checkInputText(std::string_view text,
                                                  size_t maxDepth = kMaxNestingDepth) {
  std::vector<char> open; // the closer each open bracket expects
  size_t line = 1, column = 1;
  auto problem = [&](std::string message) {
    return InputProblem{line, column, std::move(message)};
  };
  for (size_t i = 0; i < text.size(); ++i, ++column) {
    char c = text[i];
    if (c == '\0')
      return problem("the input contains a NUL byte (not MLIR text)");
    if (c == '\n') {
      ++line;
      column = 0;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      // A comment runs to the end of the line (NUL bytes inside are still refused).
      while (i + 1 < text.size() && text[i + 1] != '\n') {
        ++i;
        ++column;
        if (text[i] == '\0')
          return problem("the input contains a NUL byte (not MLIR text)");
      }
      continue;
    }
    if (c == '"') {
      // A string literal; backslash escapes the next character. An unterminated one is the
      // parser's to report.
      while (i + 1 < text.size() && text[i + 1] != '"' && text[i + 1] != '\n') {
        ++i;
        ++column;
        if (text[i] == '\0')
          return problem("the input contains a NUL byte (not MLIR text)");
        if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] != '\n') {
          ++i;
          ++column;
        }
      }
      if (i + 1 < text.size() && text[i + 1] == '"') {
        ++i;
        ++column;
      }
      continue;
    }
    if (c == '>' && i > 0 && text[i - 1] == '-')
      continue; // the arrow of a function type or map
    char closer = c == '{' ? '}' : c == '(' ? ')' : c == '[' ? ']' : c == '<' ? '>' : 0;
    if (closer) {
      open.push_back(closer);
      if (open.size() > maxDepth)
        return problem("nesting deeper than " + std::to_string(maxDepth) +
                       " brackets (regions, types or attributes); the parser would overflow "
                       "its stack");
      continue;
    }
    // Only the expected closer closes: `>=` and stray brackets are the parser's business.
    if (!open.empty() && c == open.back())
      open.pop_back();
  }
  return std::nullopt;
}

/// "|name|:line:col: error: message", the form of MLIR's diagnostics.
inline std::string formatInputProblem(const std::string &name, const InputProblem &p) {
  return name + ":" + std::to_string(p.line) + ":" + std::to_string(p.column) +
         ": error: " + p.message;
}

} // namespace hybridgen::driver

#endif // HYBRIDGEN_DRIVER_INPUTGUARD_H
