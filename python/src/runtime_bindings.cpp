// Bindings of the runtime: topology, the tiered KV pool (zero-copy numpy views), scheduler + trace.
#include "bindings.h"

#include "hybridgen/runtime/context.h"
#include "hybridgen/runtime/kv_pool.h"
#include "hybridgen/runtime/topology.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>
#include <vector>

namespace nb = nanobind;
using namespace hybridgen::rt;

namespace hybridgen::python {
namespace {

template <typename T> T unwrap(Result<T> r) { return std::move(r).valueOrThrow(); }

DType parsePoolDtype(const std::string &name) {
  if (name == "f32")
    return DType::kF32;
  if (name == "f16")
    return DType::kF16;
  if (name == "bf16")
    return DType::kBF16;
  throwArgument("KV dtype must be 'f32', 'f16' or 'bf16', got '" + name + "'");
}

/// The numpy dtype a pool array is exposed with: bf16 as raw uint16 words, because numpy has no
/// bf16 of its own (the Python layer re-views them as ml_dtypes.bfloat16 without a copy).
nb::dlpack::dtype exposedDtype(DType t) {
  switch (t) {
  case DType::kF32:
    return nb::dtype<float>();
  case DType::kF16:
    return {uint8_t(nb::dlpack::dtype_code::Float), 16, 1};
  case DType::kBF16:
    break;
  }
  return nb::dtype<uint16_t>();
}

using HostArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using RwHostArray = nb::ndarray<nb::c_contig, nb::device::cpu>;

/// The caller's output array |h| viewed in place. Taken as a handle, not as a typed parameter, so a
/// read-only, strided or non-array argument gets a message saying which, instead of nanobind's
/// overload mismatch. Never converts: results must land in the caller's memory.
template <typename Array> Array outputArray(nb::handle h, const std::string &what) {
  Array a;
  if (nb::try_cast(h, a, /*convert=*/false))
    return a;
  nb::ndarray<nb::ro, nb::device::cpu> any;
  if (!nb::try_cast(h, any, /*convert=*/false))
    throwArgument(what + ": expected a host array (numpy or DLPack), got " +
                  std::string(nb::str(nb::handle(h.type())).c_str()));
  nb::object flags = nb::getattr(h, "flags", nb::none());
  if (!flags.is_none() && !nb::cast<bool>(flags.attr("writeable")))
    throwArgument(what + " is read-only; the pool writes its result into it");
  throwArgument(what + " must be a C-contiguous array of the expected dtype (" +
                std::string(nb::str(nb::handle(h.type())).c_str()) + " does not fit)");
}

/// Checks a [..., n, kvHeads, headDim] token array in the pool dtype, where n is dim |tokenDim|;
/// returns n.
int64_t checkTokens(const KvPool &pool, const HostArray &a, const char *what, size_t tokenDim) {
  const KvLayout &L = pool.layout();
  std::string name = what;
  if (a.ndim() != tokenDim + 3)
    throwArgument(name + " must have " + std::to_string(tokenDim + 3) + " dims, got " +
                  std::to_string(a.ndim()));
  if (int64_t(a.shape(a.ndim() - 2)) != L.kvHeads || int64_t(a.shape(a.ndim() - 1)) != L.headDim)
    throwArgument(name + ": trailing dims must be [kv_heads=" + std::to_string(L.kvHeads) +
                  ", head_dim=" + std::to_string(L.headDim) + "]");
  nb::dlpack::dtype want = exposedDtype(L.dtype);
  nb::dlpack::dtype got = a.dtype();
  bool bf16Native = L.dtype == DType::kBF16 && got.code == uint8_t(nb::dlpack::dtype_code::Bfloat) &&
                    got.bits == 16;
  if (!(got == want) && !bf16Native)
    throwArgument(name + ": dtype does not match the pool's " + std::string(dtypeName(L.dtype)));
  return int64_t(a.shape(tokenDim));
}

nb::object poolArray(nb::handle self, bool isK, int32_t layer) {
  KvPool &pool = nb::cast<KvPool &>(self);
  if (layer < 0 || layer >= pool.numLayers())
    throwArgument("layer " + std::to_string(layer) + " out of range [0, " +
                  std::to_string(pool.numLayers()) + ")");
  const KvLayout &L = pool.layout();
  size_t shape[4] = {size_t(pool.numBlocks()), size_t(L.kvHeads), size_t(L.blockSize),
                     size_t(L.headDim)};
  void *base = isK ? pool.kBase(layer) : pool.vBase(layer);
  // |self| owns the memory: the numpy view keeps the pool alive, so no dangling views.
  return nb::cast(nb::ndarray<nb::numpy>(base, 4, shape, self, nullptr, exposedDtype(L.dtype)));
}

nb::dict tierDict(const TierInfo &t) {
  nb::dict d;
  d["name"] = t.name;
  d["kind"] = tierKindName(t.kind);
  d["numa_node"] = t.numaNode;
  d["reader_node"] = t.readerNode;
  d["capacity_bytes"] = t.capacityBytes;
  d["read_gbs"] = t.readGBs;
  d["bandwidth_source"] = bandwidthSourceName(t.bandwidthSource);
  d["emulated"] = t.emulated;
  return d;
}

DiscoverOptions discoverOptions(bool probe) {
  DiscoverOptions o;
  o.probeBandwidth = probe;
  return o;
}

void bindTopologyAndPool(nb::module_ &m) {
  nb::class_<Topology>(m, "Topology", "Memory tiers (HBM / DRAM / far memory) of this machine.")
      .def_static("discover", [](bool probe) { return unwrap(Topology::discover(discoverOptions(probe))); },
                  nb::arg("probe_bandwidth") = false)
      .def_static("from_config",
                  [](const std::string &text, bool probe) {
                    return unwrap(Topology::fromConfig(text, discoverOptions(probe)));
                  },
                  nb::arg("text"), nb::arg("probe_bandwidth") = false)
      .def_static("from_environment",
                  [](bool probe) { return unwrap(Topology::fromEnvironment(discoverOptions(probe))); },
                  nb::arg("probe_bandwidth") = false)
      .def_prop_ro("tiers",
                   [](const Topology &t) {
                     nb::list l;
                     for (const TierInfo &ti : t.tiers())
                       l.append(tierDict(ti));
                     return l;
                   })
      .def_prop_ro("tier_count", &Topology::tierCount)
      .def("find_tier", &Topology::findTier, nb::arg("name"))
      .def("describe", &Topology::describe)
      .def("__repr__", &Topology::describe);

  nb::class_<KvPool>(m, "KvPool", "Paged KV cache over memory tiers (one pool for all layers).")
      .def_static(
          "create",
          [](const Topology &topo, int32_t kvHeads, int32_t blockSize, int32_t headDim,
             const std::string &dtype, int32_t numLayers, std::vector<int64_t> maxBlocksPerTier,
             bool hugePages, bool spill) {
            PoolConfig cfg;
            cfg.numLayers = numLayers;
            cfg.layout.kvHeads = kvHeads;
            cfg.layout.blockSize = blockSize;
            cfg.layout.headDim = headDim;
            cfg.layout.dtype = parsePoolDtype(dtype);
            cfg.maxBlocksPerTier = std::move(maxBlocksPerTier);
            cfg.hugePages = hugePages;
            cfg.spill = spill;
            return unwrap(KvPool::create(topo, cfg));
          },
          nb::arg("topology"), nb::arg("kv_heads"), nb::arg("block_size"), nb::arg("head_dim"),
          nb::arg("dtype") = "f32", nb::arg("num_layers") = 1,
          nb::arg("max_blocks_per_tier") = std::vector<int64_t>(), nb::arg("huge_pages") = true,
          nb::arg("spill") = true)
      .def("create_sequence", &KvPool::createSequence)
      .def("free_sequence", [](KvPool &p, int64_t seq) { throwIfError(p.freeSequence(seq)); },
           nb::arg("seq"))
      .def("has_sequence", &KvPool::hasSequence, nb::arg("seq"))
      .def("sequences", &KvPool::sequences)
      .def("append_tokens", [](KvPool &p, int64_t seq, int64_t n) { return unwrap(p.appendTokens(seq, n)); },
           nb::arg("seq"), nb::arg("n"), "Reserves n token slots; returns the first new position.")
      .def(
          "write_tokens",
          [](KvPool &p, int64_t seq, int32_t layer, int64_t pos, const HostArray &k, const HostArray &v) {
            int64_t n = checkTokens(p, k, "k", 0);
            if (checkTokens(p, v, "v", 0) != n)
              throwArgument("k and v hold different token counts");
            throwIfError(p.writeTokens(seq, layer, pos, n, k.data(), v.data()));
          },
          nb::arg("seq"), nb::arg("layer"), nb::arg("pos"), nb::arg("k"), nb::arg("v"))
      .def(
          "read_tokens",
          [](const KvPool &p, int64_t seq, int32_t layer, int64_t pos, int64_t n, nb::handle kh,
             nb::handle vh) {
            // Reads into caller arrays (so the dtype/bf16 view is the caller's choice); checked
            // like writes.
            RwHostArray k = outputArray<RwHostArray>(kh, "k"), v = outputArray<RwHostArray>(vh, "v");
            HostArray kr(k), vr(v);
            if (checkTokens(p, kr, "k", 0) != n || checkTokens(p, vr, "v", 0) != n)
              throwArgument("k and v must hold exactly n tokens");
            throwIfError(p.readTokens(seq, layer, pos, n, k.data(), v.data()));
          },
          nb::arg("seq"), nb::arg("layer"), nb::arg("pos"), nb::arg("n"), nb::arg("k"), nb::arg("v"))
      .def(
          "append",
          [](KvPool &p, int64_t seq, const HostArray &k, const HostArray &v) {
            if (int64_t(k.ndim()) != 4 || int64_t(k.shape(0)) != p.numLayers())
              throwArgument("k must be [num_layers=" + std::to_string(p.numLayers()) +
                            ", n, kv_heads, head_dim]");
            int64_t n = checkTokens(p, k, "k", 1);
            if (int64_t(v.ndim()) != 4 || int64_t(v.shape(0)) != p.numLayers() ||
                checkTokens(p, v, "v", 1) != n)
              throwArgument("v must match k's shape");
            throwIfError(p.append(seq, n, k.data(), v.data()));
          },
          nb::arg("seq"), nb::arg("k"), nb::arg("v"),
          "Appends n tokens to every layer: k, v are [num_layers, n, kv_heads, head_dim].")
      .def("k_array", [](nb::handle self, int32_t layer) { return poolArray(self, true, layer); },
           nb::arg("layer") = 0, "Layer's K array as a numpy view (no copy; bf16 as uint16).")
      .def("v_array", [](nb::handle self, int32_t layer) { return poolArray(self, false, layer); },
           nb::arg("layer") = 0, "Layer's V array as a numpy view (no copy; bf16 as uint16).")
      .def("seq_len",
           [](const KvPool &p, int64_t seq) {
             if (!p.hasSequence(seq))
               throw Error(notFound("unknown sequence " + std::to_string(seq)));
             return p.seqLen(seq);
           },
           nb::arg("seq"))
      .def("block_table",
           [](const KvPool &p, int64_t seq) {
             if (!p.hasSequence(seq))
               throw Error(notFound("unknown sequence " + std::to_string(seq)));
             return p.blockTable(seq);
           },
           nb::arg("seq"))
      .def("max_blocks_in_use", &KvPool::maxBlocksInUse, nb::arg("seqs"))
      .def(
          "fill_batch",
          [](const KvPool &p, const std::vector<int64_t> &seqs, int32_t maxBlocks, nb::handle tableH,
             nb::handle lensH) {
            using Int32Array = nb::ndarray<int32_t, nb::c_contig, nb::device::cpu>;
            Int32Array table = outputArray<Int32Array>(tableH, "table (int32)");
            Int32Array lens = outputArray<Int32Array>(lensH, "lens (int32)");
            if (table.ndim() != 2 || table.shape(0) != seqs.size() || int64_t(table.shape(1)) != maxBlocks)
              throwArgument("table must be int32 [len(seqs), max_blocks]");
            if (lens.ndim() != 1 || lens.shape(0) != seqs.size())
              throwArgument("lens must be int32 [len(seqs)]");
            throwIfError(p.fillBatch(seqs, maxBlocks, table.data(), lens.data()));
          },
          nb::arg("seqs"), nb::arg("max_blocks"), nb::arg("table"), nb::arg("lens"),
          "Fills caller-owned int32 block table and lengths in place.")
      .def("migrate_block",
           [](KvPool &p, int64_t seq, int64_t logical, int32_t tier) {
             throwIfError(p.migrateBlock(seq, logical, tier));
           },
           nb::arg("seq"), nb::arg("logical"), nb::arg("tier"))
      .def_prop_ro("migrations_total", &KvPool::migrationsTotal)
      .def("tier_of_block", &KvPool::tierOfBlock, nb::arg("block"))
      .def("tier_usage",
           [](const KvPool &p, int32_t tier) {
             if (tier < 0 || tier >= p.topology().tierCount())
               throw Error(notFound("unknown tier " + std::to_string(tier)));
             TierUsage u = p.tierUsage(tier);
             return nb::make_tuple(u.usedBlocks, u.capacityBlocks);
           },
           nb::arg("tier"), "(used_blocks, capacity_blocks) of a tier.")
      .def_prop_ro("num_blocks", &KvPool::numBlocks)
      .def_prop_ro("num_layers", &KvPool::numLayers)
      .def_prop_ro("kv_heads", [](const KvPool &p) { return p.layout().kvHeads; })
      .def_prop_ro("block_size", [](const KvPool &p) { return p.layout().blockSize; })
      .def_prop_ro("head_dim", [](const KvPool &p) { return p.layout().headDim; })
      .def_prop_ro("dtype", [](const KvPool &p) { return std::string(dtypeName(p.layout().dtype)); })
      .def_prop_ro("topology", [](const KvPool &p) { return p.topology(); })
      .def_prop_rw("append_tier_order", &KvPool::appendTierOrder,
                   [](KvPool &p, std::vector<int32_t> order) {
                     throwIfError(p.setAppendTierOrder(std::move(order)));
                   });
}

} // namespace

void bindRuntime(nb::module_ &m) {
  bindTopologyAndPool(m);
  bindScheduler(m);
}

} // namespace hybridgen::python
