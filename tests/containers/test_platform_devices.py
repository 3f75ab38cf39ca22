from pathlib import Path

import pytest

from npu_rl.errors import UserError
from npu_rl.platform import devices


def _dev_tree(root: Path, ids, extra=("davinci_manager", "devmm_svm", "hisi_hdc")) -> Path:
    root.mkdir()
    for i in ids:
        (root / f"davinci{i}").touch()
    for name in extra:
        (root / name).touch()
    return root


def test_discover_counts_all_sixteen_devices_of_an_a3_node(tmp_path):
    dev = _dev_tree(tmp_path / "dev", range(16))
    found = devices.discover(dev)
    assert found == list(range(16))  # numeric order, not davinci1, davinci10, davinci11...
    assert len(list(dev.glob("davinci?"))) == 10  # what Ray's one-digit glob sees


def test_discover_ignores_control_nodes_and_missing_root(tmp_path):
    dev = _dev_tree(tmp_path / "dev", [3, 5])
    (dev / "davinci").touch()
    (dev / "davinci3x").touch()
    assert devices.discover(dev) == [3, 5]
    assert devices.discover(tmp_path / "absent") == []


def test_missing_control_devices(tmp_path):
    dev = _dev_tree(tmp_path / "dev", [0], extra=("davinci_manager",))
    assert devices.missing_control_devices(dev) == ["devmm_svm", "hisi_hdc"]


@pytest.mark.parametrize(
    "spec,expected", [("all", [0, 1, 2, 3]), ("2", [2]), ("0,3", [0, 3]), ("1-3", [1, 2, 3]), (" 3, 0-1 ", [0, 1, 3])]
)
def test_parse_selection(spec, expected):
    assert devices.parse_selection(spec, [0, 1, 2, 3]) == expected


@pytest.mark.parametrize(
    "spec,message",
    [("7", "/dev/davinci7 not found"), ("a", "not an id"), ("3-1", "backwards"), (",", "selects no device")],
)
def test_parse_selection_errors_name_the_problem(spec, message):
    with pytest.raises(UserError, match=message):
        devices.parse_selection(spec, [0, 1, 2, 3])


def test_select_takes_the_first_needed_and_fails_when_short():
    assert devices.select([0, 1, 2, 3], 2) == [0, 1]
    assert devices.select([0, 1, 2, 3], 2, "2-3") == [2, 3]
    with pytest.raises(UserError, match="needs 4 NPU.*only 2"):
        devices.select([4, 5], 4)


def test_visible_devices_are_positions_among_the_available_ones():
    # A container that mounts only /dev/davinci5 and /dev/davinci7 sees them as logical 0 and 1.
    assert devices.visible_devices_env([5, 7], [5, 7]) == {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}
    assert devices.visible_devices_env([7], [5, 7]) == {"ASCEND_RT_VISIBLE_DEVICES": "1"}
    # On a host with all eight, logical ids equal physical ones.
    assert devices.visible_devices_env([2, 6], list(range(8))) == {"ASCEND_RT_VISIBLE_DEVICES": "2,6"}
    with pytest.raises(UserError, match="davinci9"):
        devices.visible_devices_env([9], [0, 1])
