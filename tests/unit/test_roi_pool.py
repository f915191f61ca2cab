"""The gathered RoIAlign against torchvision's own kernel, and the detectors it is put into."""

import copy
from collections import OrderedDict

import pytest
import torch
import torchvision
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.models.detection.faster_rcnn import TwoMLPHead
from torchvision.ops import MultiScaleRoIAlign, roi_align

from tsvk.tasks.roi_pool import ChannelsLastMLPHead, GatheredRoIAlign, gather_roi_pooling, roi_align_gathered

torch.set_num_threads(1)


def _rois(generator: torch.Generator, count: int, images: int, extent: tuple[int, int], largest: float = 300) -> torch.Tensor:
    """Boxes all over an image of `extent` (width, height) pixels and past its edges, some under a pixel wide."""
    corner = torch.rand(count, 2, generator=generator) * torch.tensor(extent, dtype=torch.float32) * 1.2 - 20
    size = torch.rand(count, 2, generator=generator) ** 2 * largest + 0.01
    image = torch.randint(0, images, (count, 1), generator=generator).float()
    return torch.cat([image, corner, corner + size], 1)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), height=st.integers(1, 24), width=st.integers(1, 24), images=st.integers(1, 3),
       ratio=st.integers(1, 3), out_h=st.integers(1, 8), out_w=st.integers(1, 8), aligned=st.booleans(),
       scale=st.sampled_from([1.0, 0.5, 0.125, 1 / 16]))
def test_one_map_agrees_with_torchvision_roi_align(seed, height, width, images, ratio, out_h, out_w, aligned, scale):
    generator = torch.Generator().manual_seed(seed)
    maps = torch.randn(images, 5, height, width, generator=generator)
    rois = _rois(generator, 30, images, (int(width / scale), int(height / scale)))
    want = roi_align(maps, rois, (out_h, out_w), scale, ratio, aligned)
    got = roi_align_gathered([maps], rois, torch.zeros(len(rois), dtype=torch.int64), [scale], (out_h, out_w), ratio, aligned)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _pyramid(generator: torch.Generator, images: int, size: tuple[int, int]) -> "OrderedDict[str, torch.Tensor]":
    height, width = size
    return OrderedDict((str(level), torch.randn(images, 8, height // 2**(level + 2), width // 2**(level + 2), generator=generator))
                       for level in range(4))


def test_multiscale_pooling_agrees_with_torchvision_on_every_level():
    generator = torch.Generator().manual_seed(0)
    maps = _pyramid(generator, 2, (512, 640))
    boxes = [_rois(generator, 200, 1, (640, 512), largest=700)[:, 1:] for _ in range(2)]
    boxes = [torch.cat([b[:, :2].clamp(min=0), torch.maximum(b[:, 2:], b[:, :2].clamp(min=0) + 1)], 1) for b in boxes]
    original = MultiScaleRoIAlign(["0", "1", "2", "3"], 7, 2)
    want = original(maps, boxes, [(512, 640), (480, 600)])
    got = GatheredRoIAlign(copy.deepcopy(original))(maps, boxes, [(512, 640), (480, 600)])
    assert len(set(original.map_levels(boxes).tolist())) == 4  # the boxes did reach every level
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.permute(0, 2, 3, 1).is_contiguous()  # channels last: what the MLP head flattens for free


def test_no_boxes_pool_to_an_empty_batch_of_maps():
    maps = _pyramid(torch.Generator().manual_seed(0), 1, (256, 256))
    pooled = GatheredRoIAlign(MultiScaleRoIAlign(["0", "1"], 7, 2))(maps, [torch.zeros(0, 4)], [(256, 256)])
    assert pooled.shape == (0, 8, 7, 7)


@pytest.mark.parametrize("ratio, dtype", [(0, torch.float32), (2, torch.float64)])
def test_adaptive_sampling_and_other_dtypes_go_to_torchvisions_pooler(ratio, dtype, monkeypatch):
    import tsvk.tasks.roi_pool as roi_pool

    generator = torch.Generator().manual_seed(1)
    maps = OrderedDict((name, value.to(dtype)) for name, value in _pyramid(generator, 1, (256, 256)).items())
    boxes = [torch.tensor([[10.0, 20.0, 100.0, 90.0], [0.0, 0.0, 255.0, 255.0]], dtype=dtype)]
    original = MultiScaleRoIAlign(["0", "1"], 7, ratio)
    monkeypatch.setattr(roi_pool, "roi_align_gathered", lambda *a, **k: pytest.fail("gathered pooling ran"))
    got = GatheredRoIAlign(original)(maps, boxes, [(256, 256)])
    torch.testing.assert_close(got, MultiScaleRoIAlign(["0", "1"], 7, ratio)(maps, boxes, [(256, 256)]))


@pytest.mark.parametrize("memory", ["channels_last", "contiguous"])
def test_channels_last_mlp_head_answers_as_torchvisions(memory):
    torch.manual_seed(0)
    head = TwoMLPHead(16 * 7 * 7, 32)
    pooled = torch.randn(5, 7, 7, 16).permute(0, 3, 1, 2)
    pooled = pooled if memory == "channels_last" else pooled.contiguous()
    want = head(pooled)
    got = ChannelsLastMLPHead(copy.deepcopy(head), 16)(pooled)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_detectors_answer_the_same_with_gathered_pooling(tmp_path):
    from tests.support.task_models import DETECTOR, decisive_weights, reference_model

    torch.manual_seed(0)
    want_model = reference_model(DETECTOR, decisive_weights(DETECTOR, tmp_path / "det.pt"))
    got_model = copy.deepcopy(want_model)
    assert gather_roi_pooling(got_model) == 1
    assert isinstance(got_model.roi_heads.box_head, ChannelsLastMLPHead)
    images = [torch.rand(3, 480, 640), torch.rand(3, 400, 300)]
    with torch.no_grad():
        want, got = want_model(images), got_model(images)
    for w, g in zip(want, got):
        assert len(w["boxes"]) > 0 and w["labels"].tolist() == g["labels"].tolist()
        torch.testing.assert_close(g["boxes"], w["boxes"], rtol=0, atol=1e-3)
        torch.testing.assert_close(g["scores"], w["scores"], rtol=0, atol=1e-4)


def test_mask_rcnn_gets_both_poolers_and_one_stage_detectors_none():
    masks = torchvision.models.detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=3)
    assert gather_roi_pooling(masks) == 2
    assert isinstance(masks.roi_heads.mask_roi_pool, GatheredRoIAlign)
    retina = torchvision.models.detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=3)
    assert gather_roi_pooling(retina) == 0
