"""The names verl 0.9 knows its platforms by (``VERL_PLATFORM``; verl takes the device from its platform
layer): the one npu-rl registers for CPU runs (the cpu patch) and verl's own Ascend one, which the launcher
names for every Ascend launch rather than leave verl to detect it (detection falls back to nvidia where
torch_npu fails to import, ``platform_manager.py:113-117``) and which the rehearsal stands in for."""

# npu-rl's CPU platform (npu_rl.patches.cpu_plugin), and its device name: verl's trainer.device.
CPU = "cpu"
# verl v0.9.0 plugin/platform/platform_npu.py:37 registers its Ascend platform under this name.
NPU = "huawei"
