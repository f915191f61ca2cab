"""Every build-time and serving default of tsvk, written once: what `tsvk` builds, serves, tunes,
benchmarks and soaks when nothing else is asked for.

The worker's own defaults (settings schema, limits) are in `tsvk.defaults`, which every archive
carries; the few of them that tools/ reads too are imported here by name, so `tools/` reads every
default from this one module and each is written once. The Makefile leaves its variables empty so
that `tsvk` decides, and tests check that docs/commands.md and the Helm chart say the same.
"""

from tsvk.common import TORCHSERVE
from tsvk.common.defaults import (BATCH, DEVICE, MASK_THRESHOLD, MAX_BATCH, MAX_BATCH_DELAY_MS, MAX_DETECTIONS,  # noqa: F401
                                  PRECISION, RESPONSE_TIMEOUT_S, SCORE_THRESHOLD, TASK, TOPK)

# What `tsvk archive` builds when nothing else is asked for.
MODEL = "resnet18"  # also what `tsvk demo` and the single-model benchmarks build
WEIGHTS = "DEFAULT"  # torchvision's pretrained weights
BACKEND = "aoti"  # torch.export + AOTInductor with freezing: the fastest measured on the CPU
# aoti on the cpu: kernels for this machine's widest vector instructions, which the CPUs it is served on must have
# (`--cpu-isa avx2` for any x86-64 CPU with AVX2; tools/archive/backends/aoti.py)
CPU_ISA = "native"
# --precision auto (tools/archive/precision.py): bf16 where the building CPU multiplies bf16 in hardware (AMX, AVX-512
# BF16) and the backend and task build it, else fp32; int8 only when asked for (it needs calibration photos)
BUILD_PRECISION = "auto"
DETECT_BACKEND = "eager"  # a detector's default: torch.export cannot capture it; TorchScript can, but ran slower (docs/tasks.md)
# The malloc `tsvk serve` starts TorchServe and its workers with: glibc's (with the workers' heap trim, what
# `make soak` measures), or jemalloc through LD_PRELOAD, which many CPU deployments of PyTorch prefer; auto:
# jemalloc where libjemalloc.so.2 is installed, else glibc (said in the log).
ALLOCATOR = "glibc"
ALLOCATORS = ("auto", "jemalloc", "glibc")

# Segmentation builds.
SEGMENT_RESIZE = 520  # a --model-file segmenter's shorter side when --resize does not say (torchvision's weights use 520)
SEGMENT_MAX_SIDE = 2048  # the longest side a segmentation artifact accepts (its height and width are dynamic)

# Verification of detection and segmentation artifacts against the eager model (fp32).
DETECT_VERIFY_MIN_IOU = 0.9  # a compiled box matches an eager box of the same label overlapping at least this much
DETECT_VERIFY_MIN_MATCHED = 0.95  # share of the eager model's boxes the compiled model must match
DETECT_VERIFY_SCORE_ATOL = 1e-3  # largest score difference allowed between matched boxes
DETECT_VERIFY_SCORE_THRESHOLD = 0.0  # verification keeps every box: random weights score below any useful threshold
SEGMENT_VERIFY_MIN_PIXEL_AGREEMENT = 0.999  # share of pixels whose class must agree (semantic label maps)
MASK_VERIFY_MIN_PIXEL_AGREEMENT = 0.99  # share of mask pixels (matched instances) that must agree
# int8 detectors (OpenVINO backbone in fp32, the R-CNN box head's fully connected layers in dynamic int8):
DETECT_INT8_HEAD_RTOL = 0.05  # |int8 - fp32| of the box head's class logits and box deltas, x their largest value
# A score moves by up to a quarter of its logit's change (the softmax's slope peaks at 0.25): logits within 5%
# of a largest logit near 12 may move a score by 0.15. Not yet measured with trained detector weights.
DETECT_INT8_VERIFY_SCORE_ATOL = 0.15  # trained weights: largest score difference between matched boxes
DETECT_INT8_VERIFY_MIN_SCORE = 0.3  # trained weights: eager boxes scoring below this are not required to match

# int8 (--backend openvino --precision int8): calibration photos and the accuracy an archive must keep.
CALIBRATION_MAX_IMAGES = 300  # NNCF's own default subset; more adds build time, not accuracy
CALIBRATION_SHARE = 0.4  # of a --calibration directory's photos; the rest are held out for verification
HELD_OUT_MAX_IMAGES = 300  # verification runs eager fp32 and the int8 artifact on each of these
# Where the held-out photos carry labels, accuracy decides: top-1 and top-5 may each fall by at most this
# (1 point; --max-accuracy-drop). Agreement is reported beside it.
INT8_MAX_ACCURACY_DROP = 0.01
# bf16 needs no calibration, and its accuracy moves less: with labelled photos (--accuracy-photos) top-1 and top-5 may
# each fall by at most half a point
BF16_MAX_ACCURACY_DROP = 0.005
# Where they carry none, top-1 agreement with eager fp32 decides: at least this share of held-out photos
# (--tolerance asks for a floor of its own, which then decides with labels too).
INT8_MIN_TOP1_AGREEMENT = 0.97
# int8 segmenters: share of held-out photos' pixels whose class equals eager fp32's (enforced with trained weights).
SEGMENT_INT8_MIN_PIXEL_AGREEMENT = 0.95

# `tsvk config` where the archive does not say (its batch and delay defaults are the worker's: tsvk.defaults).
WORKERS = 1  # workers per model where nothing else decides: no GPU, no archive to size them (--no-archive-check)
# On the CPU `tsvk config` plans single-threaded workers, one per vCPU of each model's share, as many as
# memory holds (docs/benchmarks.md, "The rule and the tune"). A worker's memory is estimated as:
WORKER_RUNTIME_MB = 700  # what a CPU worker holds beyond its model: torch, the handler, a batch of images
WORKER_ARCHIVE_FACTOR = 4  # plus this many times its archive's size: weights, compiled code, activations
FRONTEND_MB = 512  # TorchServe's Java frontend, beside the workers

# `tsvk config`: the TorchServe config.properties it writes.
CONCURRENCY = 64  # expected concurrent clients; the job queue holds twice as many
# The largest request body, MiB. TorchServe's own 6.5 MiB rejects large phone JPEGs: a 48-50 MP one is 15-25 MB at the
# quality phones write (a 108 MP one 20-35 MB). A body is held whole until its batch is answered, by TorchServe's
# frontend and by the kserve engine alike (job_queue_size of them at most); the worker's memory is bounded by decoded
# pixels (preprocess.max_pixels), not by this.
MAX_REQUEST_MB = 32
TOKEN_EXPIRY_MIN = 60  # token-auth keys expire after this; `tsvk serve` renews them at half that age
INFERENCE_ADDRESS = "http://0.0.0.0:8080"
MANAGEMENT_ADDRESS = "http://127.0.0.1:8081"
METRICS_ADDRESS = "http://127.0.0.1:8082"
GRPC_INFERENCE_PORT = 7070
GRPC_MANAGEMENT_PORT = 7071
# The ciphers an https or TLS gRPC listener of tsvk's engine offers under TLS 1.2: forward-secret AEAD only (TLS 1.3's
# suites are OpenSSL's own); TorchServe's frontend offers two ECDHE-RSA suites, which this includes.
TLS_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"

# Where things are, relative to the working directory.
MODEL_STORE = "model_store"
CONFIG = "configs/generated.properties"
RUN_DIR = ".tsvk/run"  # the TorchServe that `tsvk serve` starts: its logs, pid and key file
READY_TIMEOUT_S = 600  # how long `tsvk serve` waits for every model to be ready
# How long a stop (`tsvk stop`, the container's SIGTERM) waits for the requests TorchServe has taken in to be
# answered before it stops TorchServe anyway; the chart's terminationGracePeriodSeconds follows it.
DRAIN_TIMEOUT_S = 30
STOP_GRACE_S = 3  # after the drain, how long TorchServe may take to exit before it is killed (nothing is in flight then)
# How long a worker may take to load its archive before it is given up: TorchServe 0.12's default_startup_timeout
# (ConfigManager.getDefaultStartupTimeout); a config's default_startup_timeout and a model's startupTimeout override it.
STARTUP_TIMEOUT_S = TORCHSERVE.startup_timeout_s
# What unpacking one archive may write (the kserve engine: tools/engines/shared/archives.py), checked from the zip's
# directory before a byte is written and counted again while writing (a header may lie). 8 GiB: the largest archive
# tsvk builds (a ViT-H/14 or a detector with its compiled kernels, fp32) unpacks to under 3 GiB; the rest is room.
# Set by config.properties' tsvk.engine.max_unpacked_mb.
ENGINE_MAX_UNPACKED_MB = 8192
# A member's uncompressed / compressed size. Weights deflate about 1.1x, Python and YAML 3-6x; deflate itself stops
# near 1,032x, where zip bombs sit. Only members larger than ENGINE_RATIO_FROM_MB are measured: a small file fills no disk.
ENGINE_MAX_MEMBER_RATIO = 100
ENGINE_RATIO_FROM_MB = 1
# Left free on the run directory's disk once an archive is unpacked: the logs, the status file, workers' temporaries.
ENGINE_DISK_RESERVE_MB = 512
# The longest message the engine's server reads from a worker (a batch's answers and the handler's metric samples),
# checked before a byte of it is allocated: a longer length prefix is a broken worker, ended and replaced. A batch
# decodes at most tsvk.defaults.MAX_BATCH_PIXELS (80 M) pixels, so the largest answer tsvk writes, a segmenter's
# label maps at the photos' size as 16-bit PNGs in base64, is about 215 MB.
ENGINE_MAX_WORKER_MESSAGE_MB = 512

# What `tsvk predict` and `tsvk demo` classify when no image is named.
IMAGE = "skimage:chelsea"
DRAW_OUTPUT = "drawn.png"  # where `tsvk draw` writes its picture
# The Open Inference Protocol front checks JSON bodies with the worker's limits (tsvk.defaults.MAX_JSON_*), and:
OIP_JSON_PIXEL_IMAGES = 8  # images of FP32 pixels (3 x crop x crop numbers each) one JSON request may carry

# `tsvk bench`: the fastest verified CPU artifact, served ("ours_fast") and probed ("ceiling_fast") next to
# the fp32 one. OpenVINO int8 ran ResNet-50 4.1x AOTInductor fp32 in-process on a 2-vCPU AMD EPYC (VNNI).
FAST_BACKEND = "openvino"
FAST_PRECISION = "int8"  # a detector's fast row too: its backbone in OpenVINO, its box head in dynamic int8
ACCURACY_IMAGES = "../shared/imagenet-samples"  # `tsvk bench accuracy`: labelled photos (wnids.txt + <wnid>_*.JPEG)
# `tsvk bench accuracy --as-sent`: how far the phone-size copies' top-1 may be from the originals', either way, as a
# fraction (0.005 is half a point).
AS_SENT_MAX_TOP1_DIFFERENCE = 0.005
# Where the benchmarks and the lab keep what they make once (weights, archives, phone-size photos, run logs); .tsvk/ is
# not committed.
BENCH_CACHE_DIR = ".tsvk/bench"

# `tsvk robustness` and `tsvk soak`.
ROBUSTNESS_MODEL = "resnet18"  # served with random weights: robustness does not depend on their values
FUZZ_INPUTS = 10_000  # requests in the Hypothesis corpus
LARGE_UPLOADS = 16  # the large-uploads part: 48 MP phone JPEGs uploaded at once, four times the queue it is served with
LARGE_UPLOADS_QUEUE = 4  # its server's job_queue_size
SOAK_MINUTES = 70.0  # long enough to span TorchServe's 60-minute key expiry
SOAK_LOAD = 0.7  # share of the measured capacity the soak sends
SOAK_MALFORMED = 0.05  # share of malformed requests in the soak

# `tsvk tune`: the measured search for the best workers x threads x batch x delay.
TUNE_MINUTES = 10.0  # the whole search, server starts included
TUNE_OUTPUT = "configs/tuned.properties"
TUNE_RESULTS_DIR = "benchmarks/results"
TUNE_DELAYS_MS = (0, 5, 10, 20, 50, 100, 200)  # max batch delays tried; the archive's suggestion is added
TUNE_MAX_INTER_OP = 2  # inter-op threads tried per worker: 1 (a classifier is one chain of ops) and 2
TUNE_NOISE = 0.03  # a neighbour must beat the current point by this share to move the climb
TUNE_CONFIRM = 2  # contenders compared with the rule's plan at the end, best first, while the budget allows
TUNE_DECISION_PAIRS = 3  # windows per side when a contender is compared with the rule's plan (tools/tune/decide.py)
TUNE_EARLY_STOP_SHARE = 0.6  # stop a candidate whose first window runs under this share of the best
TUNE_MEMORY_MARGIN = 0.1  # a candidate's estimated memory is its workers' measured RSS plus this share

# The Open Inference Protocol (KServe v2): `tsvk config --protocol oip` and the front `tsvk serve` starts.
PROTOCOLS = ("predictions", "oip")  # predictions: TorchServe's /predictions only; oip: that plus the front
PROTOCOL = "predictions"
ENGINES = ("torchserve", "kserve")  # torchserve: TorchServe 0.12 (Java); kserve: tsvk's own workers behind KServe's model server
ENGINE = "torchserve"
OIP_ADDRESS = "127.0.0.1"  # the front's REST and gRPC listen here: nothing new on a public address unless asked
OIP_REST_PORT = 8000  # Triton's ports, where tritonclient users look first
OIP_GRPC_PORT = 8001
OIP_MAX_IMAGES = 64  # images in one request; each is one TorchServe request, so TorchServe's queue bounds them too

# Slow and idle clients on tsvk's own servers: the engine's REST and gRPC servers and the OIP front's
# (tools/oip/connection_bounds.py reads them from config.properties as `tsvk.http.<name>` / `tsvk.grpc.<name>`;
# TorchServe has no key for any of them, and its Netty frontend bounds only the request line and headers' size).
# HTTP (uvicorn; tools/oip/bounded_http.py adds what uvicorn lacks):
HTTP_HEADER_TIMEOUT_S = 10.0  # a request's line and headers must arrive within this of their first byte (of the
# connection's opening for its first request), or it is answered 408 and closed; a connection that sent nothing is closed
HTTP_BODY_TIMEOUT_S = 60.0  # a request body with no byte for this long is closed (nginx's client_body_timeout)
HTTP_MAX_HEADER_BYTES = 16 * 1024  # request line and headers; more: 431 (TorchServe's Netty: 4 KiB line, 8 KiB headers)
HTTP_MAX_HEADERS = 100  # header fields in one request; more: 431 (Apache's LimitRequestFields; Netty counts none)
# An idle keep-alive connection is closed after this: KServe's own 65 s, longer than the 60 s idle timeout of common load
# balancers (AWS ALB, nginx), so a balancer never sends a request on a connection the server is closing.
HTTP_KEEP_ALIVE_S = 65.0
# Open connections the server answers requests on: a request arriving while more are open is answered 503
# too_many_connections and its connection closed (uvicorn's limit_concurrency rule); lowered to fit the open-files limit.
HTTP_MAX_CONNECTIONS = 10_000
HTTP_BACKLOG = 2048  # connections the kernel completes and queues before they are accepted (uvicorn's; <= somaxconn)
HTTP_OPEN_FILES_RESERVE = 1024  # open files kept for all but connections (workers' pipes, archives, logs; a quarter at most)
# gRPC (grpcio server arguments; tools/oip/grpc_bounds.py):
GRPC_MAX_CONCURRENT_RPCS = 1000  # calls in progress; more are refused RESOURCE_EXHAUSTED at once
GRPC_HANDSHAKE_TIMEOUT_S = 10.0  # a connection must finish its HTTP/2 handshake (preface, settings) within this
GRPC_MAX_CONNECTION_IDLE_S = 65.0  # a connection with no call for this long is sent GOAWAY (as HTTP's keep-alive)
# Every connection is sent GOAWAY at this age (clients reconnect, and spread over replicas); its calls in progress
# then have the grace to finish before it is closed: longer than a call may take (deadline + response timeout).
GRPC_MAX_CONNECTION_AGE_S = 3600.0
GRPC_MAX_CONNECTION_AGE_GRACE_S = 300.0
GRPC_KEEPALIVE_TIME_S = 60.0  # the server pings a connection with calls this often, to find clients that vanished
GRPC_KEEPALIVE_TIMEOUT_S = 20.0  # and closes it when a ping is not answered within this
GRPC_MAX_PING_STRIKES = 2  # pings a client may send too often (grpc core: more than one per 5 min without data) before GOAWAY
GRPC_MAX_METADATA_BYTES = HTTP_MAX_HEADER_BYTES  # a call's metadata (its headers); more: RESOURCE_EXHAUSTED
