// Checkpoint metadata: version-2 table layouts round-trip in every field, the format-1 file in
// tests/data (layouts as wire hex, written before version 2) still decodes, and bad metadata is
// an error naming the file and the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <limits>
#include <map>
#include <string>

#include "ps/durability/checkpoint_metadata.h"
#include "ps/durability/safetensors_file.h"

using namespace pscore::ps;

namespace {

const std::string kV1Shard0 =
    std::string(PSCORE_TEST_DATA_DIR) + "/ps_checkpoint_v1/shard-00000-of-00002.safetensors";

std::string temp_dir() {
  char tmpl[] = "/tmp/pscore_ckpt_test_XXXXXX";
  return mkdtemp(tmpl);
}

TableLayout every_field_set() {
  TableLayout l;
  l.id = 0xfedcba98u;
  TableSpec& s = l.spec;
  s.name = "emb \"quoted\"";
  s.kind = TableKind::kSparse;
  s.shape = {17};
  s.capacity = 1000;
  s.max_rows_per_shard = 4000000000LL;
  s.init = {InitKind::kUniform, -0.125, 0.1, std::numeric_limits<uint64_t>::max()};
  OptimizerSpec& o = s.optimizer;
  o.kind = OptimizerKind::kRmsprop;
  o.lr = 0.1;  // not exact in binary: must come back bit for bit
  o.momentum = 0.5;
  o.dampening = 0.25;
  o.weight_decay = 1e-300;
  o.nesterov = true;
  o.beta1 = 0.8;
  o.beta2 = 0.75;
  o.eps = std::numeric_limits<double>::infinity();
  o.amsgrad = true;
  o.lr_decay = 3;
  o.initial_accumulator_value = 0.3;
  o.alpha = 0.95;
  o.centered = true;
  o.clip_norm = 2.5;
  o.clip_value = 1.0 / 3;
  s.consistency = {Consistency::kSsp, 3, 1};
  l.parts = {{0, 0, 5}, {2, 5, 12}};
  return l;
}

// Every field, compared exactly (same_as compares only those that change behaviour).
void expect_same_layout(const TableLayout& a, const TableLayout& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.spec.name, b.spec.name);
  EXPECT_TRUE(a.spec.same_as(b.spec)) << a.spec.describe_differences(b.spec);
  EXPECT_EQ(a.spec.init.a, b.spec.init.a);
  EXPECT_EQ(a.spec.init.b, b.spec.init.b);
  EXPECT_EQ(a.spec.init.seed, b.spec.init.seed);
  EXPECT_EQ(a.spec.optimizer.dampening, b.spec.optimizer.dampening);
  EXPECT_EQ(a.spec.optimizer.clip_value, b.spec.optimizer.clip_value);
  ASSERT_EQ(a.parts.size(), b.parts.size());
  for (size_t i = 0; i < a.parts.size(); ++i) {
    EXPECT_EQ(a.parts[i].shard, b.parts[i].shard);
    EXPECT_EQ(a.parts[i].offset, b.parts[i].offset);
    EXPECT_EQ(a.parts[i].numel, b.parts[i].numel);
  }
}

// A checkpoint file holding only `metadata`; returns its path.
std::string metadata_file(const std::string& dir, const std::map<std::string, std::string>& m) {
  SafetensorsWriter w;
  for (const auto& [k, v] : m) w.set_metadata(k, v);
  const std::string path = dir + "/m.safetensors";
  w.write(path);
  return path;
}

// The message of the std::invalid_argument that reading `path`'s tables and catalog throws.
std::string read_error(const std::string& path) {
  try {
    SafetensorsReader f(path);
    CheckpointMetadata meta(f);
    Json tables, catalog;
    for (const MetadataValue& t : meta.parsed("tables", tables).elements()) meta.table_layout(t);
    for (const MetadataValue& c : meta.parsed("catalog", catalog).elements())
      meta.catalog_layout(c);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(PsCheckpointMetadata, LayoutRoundTripsEveryField) {
  const std::string file = "f.safetensors";
  for (InitKind init :
       {InitKind::kZeros, InitKind::kUniform, InitKind::kNormal, InitKind::kConstant}) {
    TableLayout l = every_field_set();
    l.spec.init.kind = init;
    if (init == InitKind::kZeros) l.spec.init.a = 0;
    if (init == InitKind::kZeros || init == InitKind::kConstant) l.spec.init.b = 0;
    const Json parsed = Json::parse(table_layout_json(l).dump());
    expect_same_layout(table_layout_from_json(MetadataValue(parsed, file, "t")), l);
  }
  const Json named = table_layout_json(every_field_set());
  EXPECT_EQ(named.at("optimizer").at("name").as_string(), "rmsprop");
  EXPECT_EQ(named.at("optimizer").at("eps").as_string(), "inf");
  EXPECT_EQ(named.at("initializer").at("low").as_double(), -0.125);
  EXPECT_EQ(named.at("initializer").at("seed").as_string(), "18446744073709551615");
  EXPECT_EQ(named.at("consistency").at("mode").as_string(), "ssp");
  EXPECT_EQ(named.at("dtype").as_string(), "F32");
}

TEST(PsCheckpointMetadata, FormatOneCheckpointStillDecodes) {
  SafetensorsReader f(kV1Shard0);
  CheckpointMetadata meta(f);
  ASSERT_EQ(meta.version(), 1);
  std::map<std::string, TableLayout> catalog;
  Json root;
  for (const MetadataValue& entry : meta.parsed("catalog", root).elements()) {
    TableLayout l = meta.catalog_layout(entry);
    EXPECT_EQ(l.id, table_id_for(l.spec.name));
    catalog[l.spec.name] = l;
  }
  ASSERT_EQ(catalog.size(), 4u);
  const TableSpec& adam = catalog.at("dense_adam").spec;
  EXPECT_EQ(adam.kind, TableKind::kDense);
  EXPECT_EQ(adam.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(adam.optimizer.kind, OptimizerKind::kAdam);
  EXPECT_EQ(adam.optimizer.lr, 0.1);
  EXPECT_EQ(adam.optimizer.weight_decay, 0.01);
  EXPECT_TRUE(adam.optimizer.amsgrad);
  EXPECT_EQ(adam.optimizer.clip_norm, 5.0);
  EXPECT_EQ(catalog.at("dense_adam").parts.size(), 1u);
  const TableSpec& sgd = catalog.at("dense_sgd").spec;
  EXPECT_EQ(sgd.init.kind, InitKind::kConstant);
  EXPECT_EQ(sgd.init.a, 0.25);
  EXPECT_EQ(sgd.optimizer.momentum, 0.9);
  EXPECT_TRUE(sgd.optimizer.nesterov);
  EXPECT_EQ(sgd.consistency.mode, Consistency::kSync);
  const TableSpec& adagrad = catalog.at("emb_adagrad").spec;
  EXPECT_EQ(adagrad.kind, TableKind::kSparse);
  EXPECT_EQ(adagrad.dim(), 3);
  EXPECT_EQ(adagrad.init.kind, InitKind::kUniform);
  EXPECT_EQ(adagrad.init.a, -0.5);
  EXPECT_EQ(adagrad.init.b, 0.5);
  EXPECT_EQ(adagrad.init.seed, 7u);
  EXPECT_EQ(adagrad.optimizer.initial_accumulator_value, 0.1);
  EXPECT_EQ(adagrad.consistency.mode, Consistency::kSsp);
  EXPECT_EQ(adagrad.consistency.staleness, 2);
  EXPECT_EQ(adagrad.capacity, 16);
  const TableSpec& rms = catalog.at("emb_rms").spec;
  EXPECT_EQ(rms.init.kind, InitKind::kNormal);
  EXPECT_EQ(rms.init.b, 0.1);
  EXPECT_EQ(rms.optimizer.kind, OptimizerKind::kRmsprop);
  EXPECT_TRUE(rms.optimizer.centered);
  EXPECT_EQ(rms.optimizer.clip_value, 0.75);
  EXPECT_EQ(rms.max_rows_per_shard, 64);
  Json tables;
  for (const MetadataValue& t : meta.parsed("tables", tables).elements()) {
    const TableLayout l = meta.table_layout(t);
    expect_same_layout(l, catalog.at(l.spec.name));
  }
}

TEST(PsCheckpointMetadata, ErrorsNameTheFileAndTheField) {
  const std::string dir = temp_dir();
  const std::string v2_table = table_layout_json(every_field_set()).dump();
  auto v2 = [&](const std::string& table) {
    return std::map<std::string, std::string>{{"format", "pscore.ps.shard"},
                                              {"format_version", "2"},
                                              {"tables", "[" + table + "]"},
                                              {"catalog", "[]"}};
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = v2_table;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  struct Case {
    std::map<std::string, std::string> metadata;
    std::string field, why;
  };
  const Case cases[] = {
      {{{"k", "v"}}, "'format'", "not a pscore shard checkpoint"},
      {{{"format", "pscore.ps.shard"}, {"format_version", "3"}},
       "'format_version'",
       "version '3' is not one this build reads"},
      {{{"format", "pscore.ps.shard"}}, "'format_version'", "missing"},
      {v2(v2_table), "", "(no error)"},
      {v2("{\"name\": \"t\"}"), "'tables[0]'", "has no member 'id'"},
      {v2(replaced("\"rmsprop\"", "\"adamx\"")), "'tables[0].optimizer.name'",
       "unknown value 'adamx' (known: sgd, adagrad, adam, adamw, rmsprop)"},
      {v2(replaced("\"lr\":0.10000000000000001", "\"lr\":\"fast\"")), "'tables[0].optimizer.lr'",
       "expected a number"},
      {v2(replaced("\"F32\"", "\"F16\"")), "'tables[0].dtype'", "unsupported dtype 'F16'"},
      {v2(replaced("\"seed\":\"18446744073709551615\"", "\"seed\":\"-1\"")),
       "'tables[0].initializer.seed'", "expected an unsigned 64-bit integer"},
      {{{"format", "pscore.ps.shard"}, {"format_version", "2"}, {"tables", "[{"}},
       "'tables'",
       "invalid JSON"},
      {{{"format", "pscore.ps.shard/1"}, {"tables", "[]"}, {"catalog", "[\"8afe\"]"}},
       "'catalog[0]'",
       "not a format-1 table layout (truncated"},
      {{{"format", "pscore.ps.shard/1"}, {"tables", "[{\"layout\": \"zz\"}]"}},
       "'tables[0].layout'",
       "bad hex digit 'z'"},
  };
  for (const Case& c : cases) {
    const std::string path = metadata_file(dir, c.metadata);
    const std::string error = read_error(path);
    EXPECT_NE(error.find(c.why), std::string::npos) << error;
    if (c.field.empty()) continue;
    EXPECT_NE(error.find("checkpoint " + path + ": metadata field " + c.field), std::string::npos)
        << error;
  }
}
