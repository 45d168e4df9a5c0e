// What an optimizer sees of data parallelism, so that optim/ never links comm/. The trainer
// hands one to whatever needs ranks to agree: the loss scaler's skip flag (any_rank), and
// an optimizer that exchanges its own state (a compressed momentum exchange, as 1-bit Adam
// would make) or averages gradients itself (average).
//
// Contract: every method but world() is a collective. Every rank calls it, in the same
// order, with the same n; it blocks until the result is in place, and every rank gets the
// same bits. With one rank each call is local and free. Called from one thread (the
// training thread). train/grad_sync.h implements it.
#pragma once

#include <cstddef>

namespace ringstep {

class Reducer {
 public:
  virtual ~Reducer() = default;

  virtual int world() const = 0;  // the ranks taking part
  // buf[0, n) = the mean over ranks of buf[0, n).
  virtual void average(float* buf, size_t n) = 0;
  // True on every rank if FLAG is true on any rank.
  virtual bool any_rank(bool flag) = 0;
};

}  // namespace ringstep
