"""A plain Flask app, as a user would write it, for gunicorn's sync workers: each worker process
imports this module and so holds its own model. Configured by environment variables because
gunicorn imports the module by name.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from flask import Flask, jsonify, request

from .eager import EagerClassifier
from .environment import DEVICE_ENV, MODEL_ENV, THREADS_ENV, WEIGHTS_ENV


def create_app() -> Flask:
    torch.set_num_threads(int(os.environ.get(THREADS_ENV, "1")))
    classifier = EagerClassifier(os.environ[MODEL_ENV], Path(os.environ[WEIGHTS_ENV]), os.environ.get(DEVICE_ENV, "cpu"))
    app = Flask(__name__)

    @app.get("/health")
    def health():
        return "ok"

    @app.post("/predictions")
    def predict():
        return jsonify(classifier.classify(request.get_data()))

    return app


app = create_app() if MODEL_ENV in os.environ else None
