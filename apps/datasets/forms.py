from django import forms


class DatasetForm(forms.Form):
    name = forms.CharField(max_length=120)
    description = forms.CharField(max_length=5000, required=False, widget=forms.Textarea(attrs={"rows": 3}))
