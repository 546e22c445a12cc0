#!/usr/bin/env python3
"""Writes a bf16 copy of a (quantized) GGUF file, so llama.cpp can be measured on the same bytes
per weight as hybridgen's imported bf16 checkpoint (bench/models/run.sh PEERS=1).

    .venv/bin/python bench/models/bf16_gguf.py IN.gguf OUT.gguf

Metadata is copied as it is (general.file_type set to bf16); every quantized tensor is dequantized
with PyPI's gguf package and stored as bf16; f32/f16/bf16 tensors (the norms) are kept. The
values are those of the quantized file, so both engines run the same model."""
import sys
from pathlib import Path

import gguf
import numpy as np

KEEP = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
        gguf.GGMLQuantizationType.BF16}


def convert(src, dst):
    reader = gguf.GGUFReader(src)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    if arch is None:
        raise SystemExit(f"bf16_gguf: {src} has no {gguf.Keys.General.ARCHITECTURE}")
    writer = gguf.GGUFWriter(dst, arch.contents(), endianess=reader.endianess)
    for field in reader.fields.values():
        # The writer writes the architecture and the GGUF.* header fields itself.
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.MOSTLY_BF16)
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    for tensor in reader.tensors:
        if tensor.tensor_type in KEEP:
            writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_dtype=tensor.tensor_type)
            continue
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        packed = gguf.quants.quantize(values, gguf.GGMLQuantizationType.BF16)
        writer.add_tensor(tensor.name, packed, raw_dtype=gguf.GGMLQuantizationType.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    if not src.is_file():
        raise SystemExit(f"bf16_gguf: no such file {src}")
    tmp = dst.with_name(dst.name + ".tmp")
    convert(src, tmp)
    tmp.replace(dst)  # a finished file or none: run.sh keeps it across runs
    print(f"bf16_gguf: {src.name} -> {dst} ({dst.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
