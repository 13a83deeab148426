"""The embedded demo model: a small scikit-learn classifier trained at start on the iris data that
scikit-learn ships (no download, ever), saved with joblib for ``mlserver_sklearn.SKLearnModel``."""

from __future__ import annotations

from pathlib import Path

__all__ = ["IRIS_EXAMPLE_ROW", "IRIS_N_FEATURES", "MODEL_FILENAME", "train_iris_model"]

MODEL_FILENAME = "model.joblib"
IRIS_N_FEATURES = 4
# First iris sample (setosa): sepal length/width, petal length/width in cm; the model predicts class 0.
IRIS_EXAMPLE_ROW: tuple[float, float, float, float] = (5.1, 3.5, 1.4, 0.2)


def train_iris_model(dest_dir: Path) -> Path:
    """Train a multinomial logistic regression on iris (deterministic, well under a second once
    scikit-learn is imported) and save it as ``dest_dir/model.joblib``; returns that path."""
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    features, labels = load_iris(return_X_y=True)
    model = LogisticRegression(max_iter=1000)
    model.fit(features, labels)
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / MODEL_FILENAME
    joblib.dump(model, path)
    return path
