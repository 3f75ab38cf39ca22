"""The Ascend host as npu-rl sees it: device nodes, CANN and driver versions,
`npu-smi` readings, and the preflight checks (`npu-rl doctor`) built on them."""
