"""The defaults a worker reads, written once.

The settings schema and the worker's limits (decode, JSON bodies, detection and segmentation answers)
read their defaults from here; build, serve, tune, bench and soak defaults live in `tsvk_tools.defaults`,
which re-exports these. The package ships inside every archive, so this module imports nothing.
"""

# What an archive holds when its settings do not say (`tsvk archive` writes each of them).
DEVICE = "cpu"
PRECISION = "fp32"
MAX_BATCH = 8  # the largest batch an artifact accepts (its batch dimension is dynamic, 1..MAX_BATCH)
TOPK = 5
# A worker hands the heap memory it freed back to the system at most this often, after a batch (glibc's
# malloc_trim, ~6 ms with a ResNet in the heap; 0: never). Without it, the memory of batches of varying
# shape stays mapped: ~70 MiB above the live heap for a ResNet-18 worker, and growing over an hour's soak.
HEAP_TRIM_INTERVAL_MS = 2000
# ...and at most once per this many batches' time: the batch after a trim maps its freed memory back in, page by
# page (ResNet-50 fp32, batch 8: 32 ms more on a 656 ms batch), so a model whose batch takes seconds would pay
# that on every batch under load; once per 20 batches it is at most a quarter of a percent.
HEAP_TRIM_BATCHES = 20
TASK = "classify"  # what a --model-file model does when --task does not say; torchvision builders name their own

# Detection answers (archive defaults; a request may ask for others with the options score_threshold, max_detections).
SCORE_THRESHOLD = 0.5  # boxes scoring lower are left out of the answer
MAX_DETECTIONS = 100  # at most this many boxes per image, the best first
MAX_DETECTIONS_LIMIT = 1000  # the most the option max_detections may ask for (the model's own cap applies too)
MASK_THRESHOLD = 0.5  # instance masks: a pixel belongs to the object where the mask's probability is at least this
SCORE_FLOOR = 0.05  # the lowest score a detector keeps where its own default is higher (torchvision R-CNNs: 0.05)
# Instance masks one image's answer may paste: the sum of its boxes' areas, in pixels (a 40 MP photo's worth,
# ~0.25 s of one thread of a 2-vCPU AMD EPYC). Past it every mask of that image is pasted on a grid scaled down
# to fit, and says so (`photo_size`): 100 boxes covering a 40 MP photo would otherwise cost a worker a minute.
MAX_MASK_PIXELS = 40_000_000
# Resized pixels a detector's forward takes at once on a CPU worker: larger batches run in slices. An R-CNN's
# working memory (padded batch, FPN maps, proposals, RoI features) grows with the pixels it is given: Mask R-CNN
# v2 on eight 800x1333 inputs grew a worker by ~4 GiB in one forward, ~1.2 GiB two at a time (this budget: two
# such inputs), in the same CPU time: one thread gains nothing from a larger forward.
CPU_FORWARD_PIXELS = 2_200_000

# Segmentation answers: the label map (one class index per pixel, a PNG) at the photo's size, or with its
# longer side at most LABEL_MAP_MAX_SIDE pixels (0: the photo's size); the option label_map=false leaves it out.
LABEL_MAP = True
LABEL_MAP_MAX_SIDE = 0

# What an archive suggests to `tsvk config`, and what `tsvk config` uses without an archive.
BATCH = 8  # requests per batch, never above the artifact's max batch
MAX_BATCH_DELAY_MS = 50  # how long TorchServe waits for a batch to fill
RESPONSE_TIMEOUT_S = 120
# Share of its model's response timeout a worker gives one batch. TorchServe kills a worker whose batch outlives
# the timeout, failing every request of it and reloading the model; a detector running its batch in CPU forward
# slices stops before a slice that would pass this share and answers the rest 503 deadline_exceeded instead.
# Half leaves room for a slice twice as slow as the ones before it (a neighbour's burst on the same cores).
BATCH_TIME_SHARE = 0.5

# The handler's limits on decoded images. Pixels are counted as the decoder will hold them, from the header before a
# pixel is decoded: a JPEG decoded at a reduced DCT scale (preprocess.jpeg_dct_scaling) counts at that scale, so a
# 108 MP phone JPEG decoded at 1/8 counts 1.7 MP; a PNG, WebP, HEIC or AVIF cannot be scaled while decoding and counts whole.
MAX_PIXELS = 40_000_000  # ~ a 7700x5200 image at full size (120 MB as RGB): a 12-24 MP photo decoded whole, far below a bomb
MAX_BATCH_PIXELS = 2 * MAX_PIXELS  # decoded pixels one batch may hold at once, any task and backend (~240 MB as RGB)
# The largest JPEG, by the pixels its header declares, that is decoded at a reduced DCT scale. DCT scaling does not
# reduce entropy decoding, which visits every coefficient (a 108 MP baseline JPEG: ~0.3 s of one AMD EPYC core at
# 1/8 scale), and a progressive JPEG keeps every coefficient in memory until its last scan (2 bytes each: ~330 MB for a
# 108 MP 4:2:0 one, 1.1 s; docs/handler.md). 128 MP admits the 108 MP sensors (12000x9000) with room; a 200 MP photo (16320x12240,
# 40-60 MB) would need this and the server's max_request_size raised, and more than Pillow opens (PILLOW_MAX_PIXELS).
MAX_JPEG_PIXELS = 128_000_000
PILLOW_MAX_PIXELS = 2 * 89_478_485  # Pillow refuses to open a larger image (2 x PIL.Image.MAX_IMAGE_PIXELS, its default)
# Same-size photos a detector or segmenter resizes in one call, at most this many pixels together (a larger
# photo alone): a detector normalizes in float32 before resizing, as torchvision does, so this bounds that
# copy to ~190 MB beside the photo's own (a 36 MP photo alone: 430 MB); batches of ordinary photos stay one call.
RESIZE_GROUP_PIXELS = 16_000_000
# GPU memory CV-CUDA's object cache may keep per worker process (its own default: half the GPU). Resize outputs
# change shape with every batch mix, so the cache fills with buffers never reused; a batch of 8 photos resized
# to 256 holds ~5 MB, so this keeps dozens of shapes while two workers on one GPU cannot exhaust it.
CVCUDA_CACHE_MB = 256
# A JPEG's decoding work, counted from its markers: a progressive decoder visits every 8x8 block of a scan's
# components once per scan (libjpeg's progressive script has 10 scans, 6 for greyscale; ~1 us of overhead each).
MAX_JPEG_SCANS = 256
# libjpeg's progressive script over the largest JPEG decoded (MAX_JPEG_PIXELS) at 4:4:4 visits 14 blocks per 64 pixels
# (DC twice over all three components, luma AC four times, each chroma's AC twice): 15 admits that with one to spare,
# ~30 M blocks. A real photo's blocks carry bits (~100 ns a visit); a scan bomb's repeated scans carry few (~25 ns),
# so a bomb at this bound costs less than the photos it lets through.
MAX_JPEG_SCAN_BLOCKS = 15 * MAX_JPEG_PIXELS // 64

# JSON request bodies (the worker and the Open Inference Protocol front), checked before they are parsed: parsed
# JSON costs up to ~64 bytes per value (short strings), so the number of values bounds its memory.
MAX_JSON_MB = 16  # bounded apart from max_request_size, which may be raised for large raw images
MAX_JSON_DEPTH = 32  # an OIP document with nested [1, 3, H, W] data is 7 deep
MAX_JSON_VALUES = 4096  # values besides preprocessed pixels: a request's fields and options need a few dozen
