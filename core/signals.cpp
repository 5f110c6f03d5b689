#include <lightning_cpp/core/signals.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace lt {

namespace {

std::atomic<int> g_signal{0};
struct sigaction g_old_int {}, g_old_term {}, g_old_hup {};

void on_signal(int sig) {
  if (g_signal.exchange(sig) != 0) ::_exit(128 + sig);  // second signal: stop now
}

}  // namespace

SignalGuard::SignalGuard() {
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
  ::sigaction(SIGHUP, &sa, &g_old_hup);  // a closed terminal: as SIGTERM
}

SignalGuard::~SignalGuard() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::sigaction(SIGHUP, &g_old_hup, nullptr);
}

int interrupt_signal() { return g_signal.load(); }

}  // namespace lt
