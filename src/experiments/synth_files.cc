// Copyright kvserve authors. experiments/synth_files.h.
#include "experiments/synth_files.h"

namespace kvserve::lab {

Status WriteSynthFiles(const SynthFileOptions& a, const Progress& progress) {
  KVSERVE_ASSIGN_OR_RETURN(SynthShapePreset preset, FindSynthShapePreset(a.shape));
  KVSERVE_ASSIGN_OR_RETURN(DType dtype, ParseDType(a.dtype));
  SynthOptions o = a.model;
  o.shape = preset.shape;
  if (a.layers > 0) o.shape.layers = a.layers;
  if (a.kv_heads > 0) o.shape.kv_heads = a.kv_heads;
  if (a.tokens > 0) o.shape.tokens = a.tokens;
  if (a.head_dim > 0) o.shape.head_dim = a.head_dim;
  o.dtype = dtype;
  o.seed = a.seed;
  const double start = NowSeconds();
  Note(progress, "generating {} cache {} (layers x kv_heads x tokens x head_dim), {}, seed {}",
       DTypeName(o.dtype), ShapeString(o.shape),
       HumanBytes(static_cast<uint64_t>(o.shape.NumElements()) * DTypeSize(o.dtype)), o.seed);
  KVSERVE_ASSIGN_OR_RETURN(KvCache cache, SynthesizeKv(o));
  KvFileMetadata meta = SynthMetadata(o);
  meta["synth.shape_preset"] = a.shape;
  Note(progress, "writing {}", a.output);
  KVSERVE_RETURN_IF_ERROR(SaveKvFile(a.output, cache.view(), meta));
  if (!a.head_scores.empty()) {
    const HeadScores scores = SynthesizeHeadScores(o.shape.layers, o.shape.kv_heads, o.seed);
    KVSERVE_RETURN_IF_ERROR(scores.Save(a.head_scores));
    Note(progress, "wrote synthetic head scores {}", a.head_scores);
  }
  Note(progress, "done in {:.1f} s", NowSeconds() - start);
  return Status::Ok();
}

}  // namespace kvserve::lab
