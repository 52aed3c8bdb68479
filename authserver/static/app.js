// tokengate operator pages: the "Copy" buttons. Nothing else runs in the browser.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const field = document.getElementById(button.dataset.copy);
  if (!field) return;
  const text = field.value ?? field.textContent;
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    field.select();
    document.execCommand("copy");
  }
  const label = button.textContent;
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = label; }, 1500);
});
