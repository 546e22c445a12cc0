//===- ModelRun.h - hybridgen-run's model mode ---------------------------------*- C++ -*-===//
#pragma once

/// True when the first argument is a path (model mode) rather than a flag (the attention demo).
bool looksLikeModelMode(int argc, char **argv);
/// Runs model mode; returns the process exit code.
int runModelMode(int argc, char **argv);
