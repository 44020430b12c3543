"""The tutorial's mnist_setup.py, with data made locally (no download): 8x8 digits from
scikit-learn, padded to the tutorial's 28x28 is not needed, so the model takes 8x8."""
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits


def mnist_dataset():
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).reshape(-1, 8, 8).astype("float32")
    return x, y.astype("int64")


def dataset_fn(global_batch_size, input_context):
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    x, y = mnist_dataset()
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    dataset = dataset.shuffle(1024, seed=0).repeat().batch(batch_size)
    return dataset


def build_cnn_model():
    return tf.keras.Sequential([
        tf.keras.Input(shape=(8, 8)),
        tf.keras.layers.Reshape(target_shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
