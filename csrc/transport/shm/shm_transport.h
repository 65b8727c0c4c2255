// Same-host transport: each rank owns a shared-memory segment holding its inbound rings and a
// futex doorbell; peers write into it directly. Peers' deaths are seen through pidfds.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/shm_segment.h"
#include "transport/shm/shm_channel.h"
#include "transport/transport.h"

namespace pscore {

struct ShmOptions {
  uint64_t ring_bytes = 4 << 20;      // collective lane, per peer
  uint64_t p2p_ring_bytes = 1 << 20;  // send/recv lane, per peer
  // Collective payloads of at least these sizes are read straight out of the sender's memory
  // (cross_memory.h) when the receiver's probe at connect allows it; 0 turns that off.
  SingleCopyBytes single_copy;
  std::string job_id = "pscore";
};

class ShmTransport : public Transport {
 public:
  // Creates this rank's segment; /dev/shm being full or unusable throws Error.
  ShmTransport(int rank, int size, ShmOptions options);
  ~ShmTransport() override;

  const std::string& segment_name() const { return own_.name(); }
  uint64_t token() const { return header()->token; }
  // Maps every peer's segment and checks its token; NetworkError when one cannot be mapped
  // (e.g. the peer is on another host).
  void connect(const std::vector<std::string>& names, const std::vector<uint64_t>& tokens);
  // Removes this rank's segment name once every peer has mapped it.
  void unlink() { own_.unlink(); }
  // Whether this rank reads `peer`'s large collective payloads straight from its memory (the
  // probe at connect succeeded and single copy is on).
  bool single_copy_from(int peer) const;

  const char* name() const override { return "shm"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Channel& channel(int peer, int lane) override;
  bool sends_by_address(size_t nbytes, Payload payload) const override {
    return single_copy_.by_size(nbytes, payload);
  }
  uint32_t begin_wait() override;
  void wait(const std::vector<WaitItem>& items, int timeout_ms, uint32_t token) override;
  void end_wait() override;
  void check_peer(int peer) override;
  void abort(const std::string& reason) override;

 private:
  ShmHeader* header() const { return static_cast<ShmHeader*>(own_.data()); }
  ShmHeader* peer_header(int peer) const;
  RingView ring(const ShmSegment& seg, int peer, int lane) const;
  void probe_single_copy(int peer);

  int rank_;
  int size_;
  ShmOptions options_;
  SingleCopyBytes single_copy_;  // options_.single_copy resolved for this rank's rings
  ShmSegment own_;
  std::vector<ShmSegment> peers_;                      // [peer]; the own slot stays empty
  std::vector<int> pidfds_;                            // [peer]; -1 when unknown
  std::vector<bool> writes_peer_;                      // [peer]; this rank may write its memory
  std::vector<std::unique_ptr<ShmChannel>> channels_;  // [peer * kNumLanes + lane]
};

}  // namespace pscore
