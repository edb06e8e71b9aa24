"""Task metrics beyond image classification, each computed by the library its field trusts:
COCO detection AP by pycocotools, segmentation IoU from one confusion matrix (checked against
torchmetrics), text-classification accuracy and macro-F1 by scikit-learn, PSNR and SSIM by
scikit-image. Each returns a small typed record that names its primary metric.

These modules hold the task-specific pieces only; reading a task's data and model outputs
through a spec is the runner's (docs/tasks.md says what is wired so far).
"""
