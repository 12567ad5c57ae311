// Process-wide logging for the runtime: one threshold, lines to stderr.
//
// Lines look like "memento[warn] node store /memento.j.n-1a2b3c4d.r0: ...". The
// threshold comes from Config::log_level (MEMENTO_LOG); Config::FromEnv() sets
// it. Messages above the threshold cost one relaxed atomic load and nothing
// else, so debug lines may sit on warm paths (not in per-byte loops).
//
// Thread-safety: every function may be called from any thread; one line is
// written with a single fwrite so lines of different threads do not interleave.
#pragma once

#include <functional>
#include <string>

namespace memento::runtime {

// Ordered by verbosity: a message is printed when its level <= the threshold.
enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// "error", "warn", "info", "debug".
const char* LogLevelName(LogLevel level);

// Sets / returns the process-wide threshold (default kWarn).
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

// True when a message at `level` would be printed.
bool LogEnabled(LogLevel level);

// Prints "memento[<level>] <message>\n" to stderr when LogEnabled(level), or
// hands (level, message) to the sink when one is set.
void Log(LogLevel level, const std::string& message);

// Where lines go instead of stderr (e.g. a language binding's logging); an
// empty function restores stderr. The sink is called from any thread that
// logs, with no lock of the runtime held; it must be thread-safe and must not
// block on the threads of the runtime.
using LogSink = std::function<void(LogLevel, const std::string&)>;
void SetLogSink(LogSink sink);

}  // namespace memento::runtime
