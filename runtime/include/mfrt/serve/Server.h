//===- Server.h - The emitted program's OpenAI-compatible server -*- C++
//-*-===//
//
// --serve HOST:PORT: instead of a batch of prompts, the program serves
// OpenAI's completions API over HTTP (cpp-httplib, Debian's
// libcpp-httplib-dev) while every rank of its plan runs the generation loop:
// the server is the loop's RequestSource (Program.h), handing rank 0 the
// requests that arrived, the ones whose clients went away, and the end once
// SIGTERM stopped admission and the last request finished (Server.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MFRT_SERVE_SERVER_H
#define MFRT_SERVE_SERVER_H

#include "mfrt/mfrt.h"

namespace mfrt {
struct Options;
struct Program;
} // namespace mfrt

namespace mfrt::serve {

/// Serves `prog` (loaded for --serve) until SIGTERM or SIGINT drained it;
/// `launch` runs the ranks. Returns the exit status.
int serveProgram(const Options &options, Program &prog, mfrt_options &launch);

} // namespace mfrt::serve

#endif // MFRT_SERVE_SERVER_H
