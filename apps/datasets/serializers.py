from rest_framework import serializers

from apps.datasets.models import Dataset


class DatasetSerializer(serializers.ModelSerializer):
    project = serializers.IntegerField(source="project_id", read_only=True)

    class Meta:
        model = Dataset
        fields = ["id", "project", "name", "description", "created_at"]


class DatasetCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=120)
    description = serializers.CharField(max_length=5000, required=False, allow_blank=True)
