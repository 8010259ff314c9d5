/* A thread Python did not start, calling into Python twice, each call in a thread state of its
 * own (as an embedder's worker calling back into Python does): ctypes creates one for each
 * callback and deletes it when the callback returns, while the thread itself lives on. */
#include <pthread.h>

typedef void (*callback)(void);
struct calls {
  callback first, second;
};

static void* run(void* arg) {
  struct calls* c = arg;
  c->first();
  c->second();
  return 0;
}

__attribute__((visibility("default"))) int run_twice_on_a_native_thread(callback first, callback second) {
  struct calls c = {first, second};
  pthread_t thread;
  if (pthread_create(&thread, 0, run, &c) != 0) return -1;
  return pthread_join(thread, 0);
}
