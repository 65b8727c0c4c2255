/* The call log of pscore's host-memory fakes (fake_cudart.c, fake_nccl.c): each fake includes
 * this once and guards it with its own lock (the *_locked functions expect it held). A call is
 * one line, integers in decimal; pointers go through U() to print as integers. Test code only. */
#ifndef PSCORE_TESTS_FAKE_LOG_H
#define PSCORE_TESTS_FAKE_LOG_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U(p) ((unsigned long long)(uintptr_t)(p)) /* pointers are logged as decimal integers */

static char* log_text;
static size_t log_size, log_capacity;

/* Appends one line (printf's format); a line longer than 510 characters is cut. */
static void log_line_locked(const char* format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  int n = vsnprintf(line, sizeof line - 1, format, args);
  va_end(args);
  if (n < 0) return;
  if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  if (log_size + (size_t)n + 1 > log_capacity) {
    size_t capacity = log_capacity ? log_capacity * 2 : 4096;
    while (capacity < log_size + (size_t)n + 1) capacity *= 2;
    char* grown = realloc(log_text, capacity);
    if (!grown) return;
    log_text = grown;
    log_capacity = capacity;
  }
  memcpy(log_text + log_size, line, (size_t)n);
  log_size += (size_t)n;
  log_text[log_size] = '\0';
}

/* Copies the log into out (at most capacity - 1 bytes and a NUL); returns its whole size. */
static size_t log_read_locked(char* out, size_t capacity) {
  if (out && capacity > 0) {
    size_t n = log_size < capacity - 1 ? log_size : capacity - 1;
    if (n) memcpy(out, log_text, n);
    out[n] = '\0';
  }
  return log_size;
}

static void log_clear_locked(void) {
  log_size = 0;
  if (log_text) log_text[0] = '\0';
}

#endif
