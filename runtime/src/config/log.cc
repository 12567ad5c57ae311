#include "memento/runtime/log.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

namespace memento::runtime {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
std::mutex g_sink_mu;
std::shared_ptr<LogSink> g_sink;  // guarded by g_sink_mu; null = stderr
}  // namespace

void SetLogSink(LogSink sink) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  g_sink = sink ? std::make_shared<LogSink>(std::move(sink)) : nullptr;
}

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "unknown";
}

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void Log(LogLevel level, const std::string& message) {
  if (!LogEnabled(level)) return;
  std::shared_ptr<LogSink> sink;
  {
    std::lock_guard<std::mutex> lock(g_sink_mu);
    sink = g_sink;
  }
  if (sink) {
    (*sink)(level, message);
    return;
  }
  // One fwrite per line: stdio locks the stream, so concurrent lines stay whole.
  std::string line = std::string("memento[") + LogLevelName(level) + "] " + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace memento::runtime
