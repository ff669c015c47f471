#!/usr/bin/env bash
# The same model (timm ResNet-18, random weights, batch 8) run by ONNX Runtime's CPU EP (through
# nsightlab's runner) and by PyTorch eagerly on the GPU, each captured with nsightlab capture.
#   bash capture_pair.sh OUTDIR      (on the GPU machine, nsightlab installed, nsys on PATH)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: capture_pair.sh OUTDIR}
mkdir -p "$out"
cd "$out"
python3 - <<'PY'
import timm, torch
m = timm.create_model("resnet18", pretrained=False).eval()
torch.onnx.export(m, torch.randn(8, 3, 224, 224), "resnet18.onnx", input_names=["x"],
                  output_names=["y"], opset_version=17, dynamo=False)
PY
cat > eager.py <<'PY'
import timm, torch
m = timm.create_model("resnet18", pretrained=False).cuda().eval()
x = torch.randn(8, 3, 224, 224, device="cuda")
with torch.inference_mode():
    for _ in range(5):
        m(x)
    torch.cuda.synchronize()
    for i in range(20):
        torch.cuda.nvtx.range_push(f"iter{i}")
        m(x)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
PY
python3 -m nsightlab.cli capture ort-cpu --store store --ort resnet18.onnx --ep cpu --iterations 20 --warmup 5
python3 -m nsightlab.cli capture torch-eager --store store -- python3 eager.py
