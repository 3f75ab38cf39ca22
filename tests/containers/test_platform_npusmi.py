from npu_rl.platform import npusmi


def test_a2_capture_one_chip_per_npu(smi_text):
    chips = npusmi.parse_info(smi_text("a2"))
    assert [c.device_id for c in chips] == list(range(8))
    assert {c.name for c in chips} == {"910B3"}
    assert all(c.phy_id is None and c.chip == 0 and c.hbm_total_mb == 65536 for c in chips)
    # NPUs 2 and 3 run a training job in this capture; the process table must not add rows.
    busy = {c.device_id: c.hbm_free_mb for c in chips if c.hbm_free_mb < 10000}
    assert busy == {2: 65536 - 61850, 3: 65536 - 61847}
    assert chips[0].bus_id == "0000:C1:00.0"


def test_a3_capture_two_chips_per_npu_keyed_by_phy_id(smi_text):
    chips = npusmi.parse_info(smi_text("a3"))
    assert len(chips) == 16
    assert [c.device_id for c in chips] == list(range(16))
    assert [(c.npu, c.chip) for c in chips[:4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(c.health == "OK" and c.name == "Ascend910" for c in chips)
    assert chips[15].hbm_used_mb == 2860 + 3 * 15


def test_unhealthy_and_garbage_input():
    assert npusmi.parse_info("") == []
    assert npusmi.parse_info("npu-smi: command failed\n| x | y |\n") == []


def test_health_column_is_kept(smi_text):
    text = smi_text("a2").replace("| 1     910B3               | OK     ", "| 1     910B3               | Warning", 1)
    chips = npusmi.parse_info(text)
    assert chips[1].health == "Warning" and chips[0].health == "OK"
