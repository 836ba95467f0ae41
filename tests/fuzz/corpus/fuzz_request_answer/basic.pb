
answerWhen does the mill open?6The miller still opens the doors every morning at six.