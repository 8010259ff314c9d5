/* The address ranges a fake driver knows as its device memory (its own allocations, and those a
 * test registers), which its pointer-attribute query answers from. Included by each fake driver
 * source; the functions are static, so each library has its own list. */
#ifndef FAKE_RANGES_H
#define FAKE_RANGES_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

struct fake_range { uintptr_t base; size_t bytes; struct fake_range* next; };
static struct fake_range* fake_ranges;  /* newest first */
static pthread_mutex_t fake_ranges_mutex = PTHREAD_MUTEX_INITIALIZER;

static void fake_ranges_add(uintptr_t base, size_t bytes) {
  struct fake_range* r = malloc(sizeof *r);
  r->base = base;
  r->bytes = bytes ? bytes : 1;
  pthread_mutex_lock(&fake_ranges_mutex);
  r->next = fake_ranges;
  fake_ranges = r;
  pthread_mutex_unlock(&fake_ranges_mutex);
}

static void fake_ranges_forget(uintptr_t base) {
  pthread_mutex_lock(&fake_ranges_mutex);
  for (struct fake_range** at = &fake_ranges; *at; at = &(*at)->next)
    if ((*at)->base == base) {
      struct fake_range* gone = *at;
      *at = gone->next;
      free(gone);
      break;
    }
  pthread_mutex_unlock(&fake_ranges_mutex);
}

static int fake_ranges_contain(uintptr_t p) {
  int found = 0;
  pthread_mutex_lock(&fake_ranges_mutex);
  for (struct fake_range* r = fake_ranges; r && !found; r = r->next) found = p >= r->base && p - r->base < r->bytes;
  pthread_mutex_unlock(&fake_ranges_mutex);
  return found;
}

#endif
