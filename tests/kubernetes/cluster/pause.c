/* The pod sandbox's process for the real-cluster tests (tests/kubernetes/
 * cluster): what Kubernetes' pause image does, so that no image has to come
 * from a registry. It holds the pod's namespaces, reaps the children that
 * the other containers' processes orphan into it (it is their PID 1 when the
 * pod shares a process namespace), and exits on SIGINT or SIGTERM. Linked
 * statically: the image holds this file and nothing else. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void Stop(int sig) {
  (void)sig;
  _exit(0);
}

static void Reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {0};
  stop.sa_handler = Stop;
  sigaction(SIGINT, &stop, NULL);
  sigaction(SIGTERM, &stop, NULL);
  struct sigaction reap = {0};
  reap.sa_handler = Reap;
  reap.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &reap, NULL);
  for (;;) pause();
  return 0;
}
