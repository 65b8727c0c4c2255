// Writes the seed corpora of the fuzz targets from pscore's real encoders, so every run starts
// from valid frames, specs, checkpoints and logs: make_corpus <corpus dir> [<tests/data dir>].
// Each seed lands in <corpus dir>/<target>/seed_<what>; the format-1 checkpoint and logs of
// tests/data join the checkpoint and update-log corpora.
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "collectives/message.h"
#include "common/frame.h"
#include "ps/durability/checkpoint_metadata.h"
#include "ps/wire/ps_handshake.h"
#include "ps/wire/ps_protocol.h"
#include "ps/wire/table_spec.h"
#include "recovering_shard.h"
#include "store/store_handshake.h"
#include "store/store_protocol.h"

using namespace pscore;
using namespace pscore::ps;

namespace {

std::string g_root;

void seed(const std::string& target, const std::string& what, const std::string& bytes) {
  const std::string dir = g_root + "/" + target;
  ::mkdir(dir.c_str(), 0755);
  fuzz::write_file(dir + "/seed_" + what, reinterpret_cast<const uint8_t*>(bytes.data()),
                   bytes.size());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

template <typename T>
std::string raw(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

auth::Nonce nonce(uint8_t fill) {
  auth::Nonce n;
  n.fill(fill);
  return n;
}

void store_seeds() {
  StoreHello plain;
  plain.job_id = "job";
  StoreHello authenticating = plain;
  authenticating.authenticate = true;
  authenticating.client_nonce = nonce(7);
  const auto hello = static_cast<uint8_t>(store_wire::Op::kHello);
  seed("fuzz_store_frame", "hello", store_wire::encode_frame(hello, 1, encode_hello(plain)));
  seed("fuzz_store_frame", "hello_auth",
       store_wire::encode_frame(hello, 1, encode_hello(authenticating)));
  StoreChallenge challenge{true, nonce(9), auth::server_proof("t", nonce(9), nonce(7), {})};
  seed("fuzz_store_frame", "challenge",
       store_wire::encode_frame(0, 1, encode_challenge(challenge)));
  WireWriter<> keys;
  keys.i64(1000);
  store_wire::write_keys(keys, {"rank0", "rank1/addr"});
  seed("fuzz_store_frame", "wait",
       store_wire::encode_frame(static_cast<uint8_t>(store_wire::Op::kWait), 2, keys.take()));
}

void handshake_seeds() {
  Hello hello{kProtocolVersion, 3, true, nonce(1), "job"};
  seed("fuzz_handshake", "ps_hello", encode_hello(hello));
  seed("fuzz_handshake", "ps_challenge", encode_challenge(Challenge{nonce(2), {}}));
  seed("fuzz_handshake", "ps_welcome", encode_welcome(Welcome{1, 4, 8, 12345}));
  const auth::Binding binding{"job", "fuzz"};
  const auth::Proof proof = auth::client_proof("fuzz-token", nonce(2), nonce(1), binding);
  seed("fuzz_handshake", "auth_proof", std::string(1, '\1') + raw(nonce(1)) + raw(proof));
}

void message_seeds() {
  MessageHeader h;
  h.op = static_cast<uint8_t>(OpKind::kAllreduce);
  h.dtype = static_cast<uint8_t>(DType::kFloat32);
  h.seq = 42;
  h.nbytes = 4096;
  h.tag = 0;
  seed("fuzz_message_header", "same", raw(h) + raw(h));
  MessageHeader other = h;
  other.op = static_cast<uint8_t>(OpKind::kBroadcast);
  other.nbytes = 12;
  seed("fuzz_message_header", "differs", raw(h) + raw(other));
}

std::vector<TableSpec> specs() {
  TableSpec dense;
  dense.name = "weights";
  dense.shape = {64, 32};
  dense.init = {InitKind::kUniform, -0.1, 0.1, 7};
  dense.optimizer.kind = OptimizerKind::kAdam;
  dense.consistency = {Consistency::kSync, 0, 1};
  TableSpec sparse;
  sparse.name = "emb";
  sparse.kind = TableKind::kSparse;
  sparse.shape = {8};
  sparse.capacity = 64;
  sparse.init = {InitKind::kNormal, 0, 0.01, 3};
  sparse.optimizer.kind = OptimizerKind::kAdagrad;
  sparse.consistency = {Consistency::kSsp, 2, 0};
  return {dense, sparse};
}

void ps_wire_seeds(ShardState& shard) {
  for (const TableSpec& s : specs()) {
    ByteBuffer spec, layout;
    WireWriter<ByteBuffer&> ws(spec), wl(layout);
    encode_spec(ws, s);
    encode_layout(wl, shard.catalog_lookup(s.name));
    seed("fuzz_ps_wire", "spec_" + s.name, std::string(spec.data(), spec.data() + spec.size()));
    seed("fuzz_ps_wire", "layout_" + s.name,
         std::string(layout.data(), layout.data() + layout.size()));
    seed("fuzz_json", "layout_" + s.name, table_layout_json(shard.catalog_lookup(s.name)).dump());
  }
}

// A shard with a dense and a sparse table, both updated, logging to `dir`.
void fill_shard(ShardState& shard) {
  shard.recover();
  for (const TableSpec& s : specs()) {
    TableLayout layout = shard.catalog_create(s).first;
    shard.create_part(layout, nullptr, 0);
  }
  std::shared_lock<std::shared_mutex> gate(shard.apply_gate());
  ReplyOutbox out;
  for (const auto& t : shard.tables()) {
    PushHeader h;
    h.seq = 1;
    if (t->dense()) {
      std::vector<float> grad(t->part().numel, 0.5f);
      t->push_dense(h, grad.data(), false, [](ByteBuffer&&) {}, out);
    } else {
      const int64_t ids[2] = {3, 1000};
      std::vector<float> grads(2 * t->spec().dim(), 0.25f);
      t->push_sparse(h, 2, ids, grads.data(), false, [](ByteBuffer&&) {}, out);
    }
  }
  gate.unlock();
  shard.worker_done(1, out);
  shard.add_global_step(5);
}

void durable_seeds(const std::string& data_dir) {
  const auto& [opts, snap, log] = fuzz::recovering_shard();
  {
    ShardState shard(opts);
    fill_shard(shard);
    ps_wire_seeds(shard);
    seed("fuzz_update_log", "two_tables", read_file(log));
    shard.save(opts.recover_dir);
    seed("fuzz_checkpoint", "two_tables", read_file(snap));
    std::remove(snap.c_str());
    std::remove(log.c_str());
  }
  if (data_dir.empty()) return;
  seed("fuzz_checkpoint", "format1",
       read_file(data_dir + "/ps_checkpoint_v1/shard-00001-of-00002.safetensors"));
  seed("fuzz_update_log", "format1",
       read_file(data_dir + "/ps_wal_v1/s1/shard-00001-of-00002.wal"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_corpus <corpus dir> [<tests/data dir>]\n");
    return 2;
  }
  g_root = argv[1];
  ::mkdir(g_root.c_str(), 0755);
  store_seeds();
  handshake_seeds();
  message_seeds();
  durable_seeds(argc > 2 ? argv[2] : "");
  return 0;
}
