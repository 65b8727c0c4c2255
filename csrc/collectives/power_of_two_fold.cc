#include "collectives/algorithms.h"

namespace pscore {

PowerOfTwoFold::PowerOfTwoFold(const Comm& c) : rank_(c.rank()) {
  while (p2_ * 2 <= c.size()) p2_ *= 2;
  rem_ = c.size() - p2_;
  vrank_ = rank_ < 2 * rem_ ? rank_ / 2 : rank_ - rem_;
}

bool PowerOfTwoFold::fold_in(Comm& c, void* buf, size_t nbytes, ReduceOp op) const {
  if (rank_ >= 2 * rem_) return true;
  Exchange x = c.exchange();
  if (rank_ % 2 == 1) {
    x.recv_reduce(rank_ - 1, buf, nbytes, op);
    x.run();
    return true;
  }
  x.send_to_fold(rank_ + 1, buf, nbytes);
  x.run();
  Exchange back = c.exchange();
  back.recv(rank_ + 1, buf, nbytes);
  back.run();
  return false;
}

void PowerOfTwoFold::fold_out(Comm& c, const void* buf, size_t nbytes) const {
  if (rank_ >= 2 * rem_) return;
  Exchange x = c.exchange();
  x.send(rank_ - 1, buf, nbytes);
  x.run();
}

}  // namespace pscore
