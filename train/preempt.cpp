#include "train/preempt.h"

#include <unistd.h>

#include <csignal>

namespace ringstep {
namespace {

volatile std::sig_atomic_t g_signals = 0;
struct sigaction g_old_term, g_old_int;

extern "C" void on_signal(int sig) {
  if (g_signals > 0) _exit(128 + sig);  // async-signal-safe, no destructors
  g_signals = g_signals + 1;
}

}  // namespace

PreemptGuard::PreemptGuard() {
  g_signals = 0;
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

PreemptGuard::~PreemptGuard() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

bool PreemptGuard::requested() const { return g_signals > 0; }

}  // namespace ringstep
